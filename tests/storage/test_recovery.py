"""Recovery of a damaged partition directory: torn tails, bit flips, garbage, bad headers,
corrupt or stale index files, and what ``PartitionLog.open`` reports about them.

Every test writes a real log, damages its files on disk with plain file I/O (mostly after
a clean close; a few under a running writer) and reopens it, or reads it out of process
with ``PartitionReader``. The expected records are always the ones the test wrote, never
ones read back from the log.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest

from sparklog.errors import CorruptSegmentError
from sparklog.storage import names
from sparklog.storage.active import FILE_HEADER_SIZE, scan
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.reader import PartitionReader

from .recovery_helpers import (
    REPO_ROOT,
    TOPIC,
    Record,
    WrittenLog,
    _arrow_path,
    _batch,
    _expected,
    _flip,
    _frame_of,
    _open,
    _read_all,
    _records,
    _reopened,
    _replace_file,
)

# ---------------------------------------------------------------------- torn tails


def test_truncation_anywhere_in_the_last_frame_keeps_exactly_the_frames_before_it(
    fs: LocalFileSystem, fast_root: str, written_fast: WrittenLog
) -> None:
    last = written_fast.frames[-1]
    kept = _expected(last.base_offset)
    for cut in range(last.position, last.end):
        _replace_file(written_fast.path, written_fast.data[:cut])
        with _reopened(fs, fast_root) as log:
            assert log.log_end_offset == log.high_watermark == last.base_offset, cut
            assert _read_all(log) == kept, cut
        assert fs.size(written_fast.path) == last.position, cut


@pytest.mark.parametrize(
    "cut_into_last_frame",
    [1, 8, 31, 32, 33, 200, -1],
    ids=lambda c: f"at+{c}" if c >= 0 else "last_byte_missing",
)
def test_append_after_torn_tail_recovery_continues_at_the_next_offset(
    fs: LocalFileSystem, root: str, written: WrittenLog, cut_into_last_frame: int
) -> None:
    last = written.frames[-1]
    cut = (last.end if cut_into_last_frame < 0 else last.position) + cut_into_last_frame
    _replace_file(written.path, written.data[:cut])
    with _reopened(fs, root) as log:
        result = log.append(_batch(last.base_offset, 4))
        assert (result.base_offset, result.last_offset) == (
            last.base_offset,
            last.base_offset + 3,
        )
    with _reopened(fs, root) as log:
        assert _read_all(log) == _expected(last.base_offset + 4)
        assert log.recovery.truncated_bytes == 0


def test_torn_tail_is_reported_as_truncated_bytes(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    last = written.frames[-1]
    cut = last.position + 100
    _replace_file(written.path, written.data[:cut])
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 100


def test_cut_exactly_at_a_frame_boundary_is_not_a_truncation(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    last = written.frames[-1]
    _replace_file(written.path, written.data[: last.position])
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 0
        assert _read_all(log) == _expected(last.base_offset)


def test_torn_tail_of_the_active_segment_after_rolls_keeps_sealed_records(
    fs: LocalFileSystem, root: str
) -> None:
    log = _open(fs, root)
    log.append(_batch(0, 5))
    log.roll()
    log.append(_batch(5, 3))
    log.append(_batch(8, 2))
    log.close()
    path = _arrow_path(root, 5)
    frames = scan(fs.read_buffer(path), 5)
    _replace_file(path, fs.read_bytes(path)[: frames[-1].end - 1])
    with _reopened(fs, root) as log:
        assert [s.name for s in log.manifest.segments] == [
            names.segment_name(0),
            names.segment_name(5, kind=names.ACTIVE_KIND),
        ]
        assert _read_all(log) == _expected(8)
        assert log.append(_batch(8, 2)).base_offset == 8


# ---------------------------------------------------------------------- bit flips


def test_bit_flips_in_the_last_two_frames_keep_the_frames_before_the_damaged_one(
    fs: LocalFileSystem, fast_root: str, written_fast: WrittenLog
) -> None:
    frames = written_fast.frames
    for pos in range(frames[-2].position, frames[-1].end, 37):
        damaged = frames[_frame_of(frames, pos)]
        _replace_file(written_fast.path, _flip(written_fast.data, pos))
        with _reopened(fs, fast_root) as log:
            assert log.log_end_offset == damaged.base_offset, pos
            assert _read_all(log) == _expected(damaged.base_offset), pos
            assert log.recovery.truncated_bytes == len(written_fast.data) - damaged.position, pos


def test_bit_flips_in_the_middle_frame_drop_it_and_every_frame_after_it(
    fs: LocalFileSystem, fast_root: str, written_fast: WrittenLog
) -> None:
    middle = written_fast.frames[2]
    positions = [
        *range(middle.position, middle.position + 32),
        *range(middle.position, middle.end, 53),
    ]
    positions.append(middle.end - 1)
    for pos in positions:
        _replace_file(written_fast.path, _flip(written_fast.data, pos))
        with _reopened(fs, fast_root) as log:
            assert _read_all(log) == _expected(middle.base_offset), pos
            assert fs.size(written_fast.path) == middle.position, pos


def test_bit_flip_in_the_first_frame_leaves_an_empty_segment_that_takes_appends(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    first = written.frames[0]
    _replace_file(written.path, _flip(written.data, first.position + 40))
    with _reopened(fs, root) as log:
        assert log.log_end_offset == 0
        assert _read_all(log) == []
        assert log.append(_batch(0, 2)).base_offset == 0
    with _reopened(fs, root) as log:
        assert _read_all(log) == _expected(2)


def test_out_of_process_reader_never_returns_a_flipped_record(
    fs: LocalFileSystem, fast_root: str, written_fast: WrittenLog
) -> None:
    """Before the writer recovers, a reader either returns correct records or raises."""
    expected = _expected(written_fast.records)
    starts = [0, 4, 9, written_fast.records - 1]
    for pos in range(FILE_HEADER_SIZE, len(written_fast.data), 41):
        _replace_file(written_fast.path, _flip(written_fast.data, pos))
        damaged = written_fast.frames[_frame_of(written_fast.frames, pos)]
        for start in starts:
            got: list[Record] = []
            try:
                for batch in PartitionReader(fs, fast_root, TOPIC, 0).view().batches(start):
                    got.extend(_records([batch]))
            except CorruptSegmentError:
                assert damaged.next_offset > start, (pos, start)
            else:
                assert got == expected[start:], (pos, start)
            assert got == expected[start : start + len(got)], (pos, start)


# ---------------------------------------------------------------------- garbage


def test_random_garbage_after_the_last_frame_is_truncated(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    garbage = random.Random(7).randbytes(123)
    _replace_file(written.path, written.data + garbage)
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 123
        assert _read_all(log) == _expected(written.records)
    assert fs.read_bytes(written.path) == written.data


def test_zero_fill_after_the_last_frame_is_truncated(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    """What a filesystem can leave after a crash: the size grew, the data never landed."""
    _replace_file(written.path, written.data + bytes(4096))
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 4096
        assert _read_all(log) == _expected(written.records)
        assert log.append(_batch(written.records, 1)).base_offset == written.records


def test_replayed_copy_of_the_last_frame_is_not_taken_as_new_records(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    last = written.frames[-1]
    replay = written.data[last.position : last.end]
    _replace_file(written.path, written.data + replay)
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == len(replay)
        assert _read_all(log) == _expected(written.records)


def test_frame_header_with_a_wrong_crc_after_the_last_frame_is_truncated(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    last = written.frames[-1]
    fake = struct.pack("<4sIIIqq", b"SLFR", 12345, 0, 1, last.next_offset, 0)
    _replace_file(written.path, written.data + fake)
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == len(fake)
        assert log.log_end_offset == written.records


# ---------------------------------------------------------------------- file header


def test_damaged_file_magic_restarts_the_segment_empty(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    _replace_file(written.path, _flip(written.data, 3))
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == len(written.data)
        assert log.log_end_offset == log.high_watermark == 0
        assert _read_all(log) == []
    assert fs.size(written.path) == FILE_HEADER_SIZE


def test_appends_after_a_damaged_header_start_at_the_segment_base_offset(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    _replace_file(written.path, b"NOTMAGIC" + written.data[8:])
    with _reopened(fs, root) as log:
        assert log.append(_batch(0, 3)).base_offset == 0
    with _reopened(fs, root) as log:
        assert _read_all(log) == _expected(3)
        assert log.recovery.truncated_bytes == 0


@pytest.mark.parametrize("size", [0, 1, 8, 15])
def test_segment_shorter_than_its_header_restarts_empty(
    fs: LocalFileSystem, root: str, written: WrittenLog, size: int
) -> None:
    _replace_file(written.path, written.data[:size])
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == size
        assert _read_all(log) == []
        assert log.append(_batch(0, 1)).base_offset == 0
    assert fs.read_bytes(written.path)[:FILE_HEADER_SIZE] == written.data[:FILE_HEADER_SIZE]


def test_segment_holding_only_its_header_is_empty_and_not_truncated(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    _replace_file(written.path, written.data[:FILE_HEADER_SIZE])
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 0
        assert log.log_end_offset == 0


def test_damaged_header_of_a_later_active_segment_restarts_it_at_its_base_offset(
    fs: LocalFileSystem, root: str
) -> None:
    log = _open(fs, root)
    log.append(_batch(0, 4))
    log.roll()
    log.append(_batch(4, 3))
    log.close()
    path = _arrow_path(root, 4)
    _replace_file(path, _flip(fs.read_bytes(path), 0))
    with _reopened(fs, root) as log:
        assert _read_all(log) == _expected(4)
        assert log.append(_batch(4, 2)).base_offset == 4
    with _reopened(fs, root) as log:
        assert _read_all(log) == _expected(6)


# ---------------------------------------------------------------------- recovery report


def test_clean_reopen_reports_no_damage(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 0
        assert log.recovery.lost_acknowledged is False
        assert log.recovery.deleted_orphans == []
        assert log.recovery.resealed == []


def test_torn_tail_below_the_recovery_point_reports_lost_acknowledged_data(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    """A clean close records the recovery point at the end: losing any of it is reported."""
    _replace_file(written.path, written.data[:-1])
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes > 0
        assert log.recovery.lost_acknowledged is True


def test_garbage_past_the_recovery_point_is_not_lost_acknowledged_data(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    _replace_file(written.path, written.data + b"\xff" * 40)
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 40
        assert log.recovery.lost_acknowledged is False


def test_lost_acknowledged_is_cleared_once_the_damage_is_repaired(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    _replace_file(written.path, written.data[:-1])
    with _reopened(fs, root) as log:
        assert log.recovery.lost_acknowledged is True
    with _reopened(fs, root) as log:
        assert log.recovery.truncated_bytes == 0
        assert log.recovery.lost_acknowledged is False


_CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys
    from sparklog.storage.config import TopicConfig
    from sparklog.storage.fs.local import LocalFileSystem
    from sparklog.storage.log import PartitionLog
    from sparklog.storage.records import make_records

    log = PartitionLog.open(LocalFileSystem(), sys.argv[1], "t", 0, TopicConfig())
    for i in range(4):
        log.append(make_records([b"v%d" % i]))  # durable: fsynced and acknowledged
    os._exit(0)  # no close: the recovery point still says where the log was opened
    """
)


def test_damage_to_records_acknowledged_after_the_recovery_point_is_reported_as_lost(
    fs: LocalFileSystem, root: str
) -> None:
    """The recovery point moves only on open, roll and clean close, but the high-watermark
    checkpoint (written after each fsync) still marks the later records as acknowledged."""
    subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, root],
        check=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    path = _arrow_path(root)
    data = fs.read_bytes(path)
    assert len(scan(fs.read_buffer(path), 0)) == 4
    _replace_file(path, data[:-8])
    log = _open(fs, root)
    try:
        assert log.recovery.truncated_bytes > 0
        assert log.recovery.lost_acknowledged is True
        assert log.log_end_offset == 3
    finally:
        log.close()
