"""Recovery of damaged index files: the active segment's offset and time indexes (rewritten
on reopen, never trusted by readers) and sealed segments' indexes (checked against the
Parquet footer). Every test damages real files and reads back the records it wrote."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import pytest

from sparklog.storage import names
from sparklog.storage.active import build_indexes, scan
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.index import OffsetIndex, TimeIndex
from sparklog.storage.log import PartitionLog
from sparklog.storage.reader import PartitionReader
from sparklog.storage.sealed import SealedSegment, indexes_from_metadata

from .recovery_helpers import (
    BATCH_SIZES,
    CONFIG,
    TOPIC,
    WrittenLog,
    _arrow_path,
    _batch,
    _expected,
    _expected_offset_for_timestamp,
    _index_bytes,
    _open,
    _partition,
    _read_all,
    _records,
    _reopened,
    _replace_file,
    _timestamp_targets,
)

# ---------------------------------------------------------------------- active indexes


def _active_index_damage(
    kind: str, written: WrittenLog, original: bytes, rng: random.Random
) -> bytes:
    frames, size = written.frames, len(written.data)
    if kind == "empty":
        return b""
    if kind == "odd_length":
        return original[:-5]
    if kind == "random_bytes":
        return rng.randbytes(len(original))
    if kind == "points_at_other_frames":
        return _index_bytes(
            (h.base_offset, frames[(i + 1) % len(frames)].position)
            for i, h in enumerate(frames[:-1])
        )
    if kind == "points_into_payloads":
        return _index_bytes((h.base_offset, h.position + 40) for h in frames)
    if kind == "points_past_the_end":
        return _index_bytes((h.base_offset, size + 8 * i) for i, h in enumerate(frames))
    if kind == "negative_positions":
        return _index_bytes((h.base_offset, h.position - size) for h in frames)
    raise AssertionError(kind)


ACTIVE_INDEX_DAMAGE = [
    "deleted",
    "empty",
    "odd_length",
    "random_bytes",
    "points_at_other_frames",
    "points_into_payloads",
    "points_past_the_end",
    "negative_positions",
]


def _damage_file(path: str, damaged: bytes | None) -> None:
    if damaged is None:
        os.unlink(path)
    else:
        _replace_file(path, damaged)


@pytest.mark.parametrize("damage", ACTIVE_INDEX_DAMAGE)
def test_reopen_rewrites_damaged_active_index_files(
    fs: LocalFileSystem, root: str, written: WrittenLog, damage: str
) -> None:
    rng = random.Random(damage)
    for path in (written.path + ".index", written.path + ".timeindex"):
        original = fs.read_bytes(path)
        _damage_file(
            path,
            None if damage == "deleted" else _active_index_damage(damage, written, original, rng),
        )
    expected_oidx, expected_tidx = build_indexes(written.frames, CONFIG.index_interval_bytes)
    with _reopened(fs, root) as log:
        assert fs.read_bytes(written.path + ".index") == expected_oidx.to_bytes()
        assert fs.read_bytes(written.path + ".timeindex") == expected_tidx.to_bytes()
        for start in range(written.records + 1):
            assert _read_all(log, start) == _expected(written.records)[start:], start


@pytest.mark.parametrize("damage", ACTIVE_INDEX_DAMAGE)
def test_out_of_process_reader_reads_correctly_through_a_damaged_active_offset_index(
    fs: LocalFileSystem, root: str, written: WrittenLog, damage: str
) -> None:
    path = written.path + ".index"
    original = fs.read_bytes(path)
    rng = random.Random(damage)
    _damage_file(
        path, None if damage == "deleted" else _active_index_damage(damage, written, original, rng)
    )
    expected = _expected(written.records)
    view = PartitionReader(fs, root, TOPIC, 0).view()
    for start in range(written.records + 1):
        assert _records(view.batches(start)) == expected[start:], start


@pytest.mark.parametrize("seed", range(8))
def test_out_of_process_reader_reads_correctly_through_random_one_entry_offset_indexes(
    fs: LocalFileSystem, root: str, written: WrittenLog, seed: int
) -> None:
    """Sixteen random bytes always parse as a one-entry index; it must only be a hint."""
    _replace_file(written.path + ".index", random.Random(seed).randbytes(16))
    expected = _expected(written.records)
    view = PartitionReader(fs, root, TOPIC, 0).view()
    for start in range(written.records + 1):
        assert _records(view.batches(start)) == expected[start:], start


def test_out_of_process_reader_reads_correctly_through_an_index_stale_from_before_recovery(
    fs: LocalFileSystem, root: str, written: WrittenLog
) -> None:
    """The index of a previous life of the segment (other frame layout) is only a hint."""
    stale = fs.read_bytes(written.path + ".index")
    _replace_file(written.path, written.data[: written.frames[1].end])
    with _reopened(fs, root) as log:
        seq = written.frames[1].next_offset
        for n in (1, 1, 2, 1, 1, 3):
            log.append(_batch(seq, n))
            seq += n
    _replace_file(written.path + ".index", stale)
    view = PartitionReader(fs, root, TOPIC, 0).view()
    for start in range(seq + 1):
        assert _records(view.batches(start)) == _expected(seq)[start:], start


ACTIVE_TIME_INDEX_DAMAGE = [
    "deleted",
    "odd_length",
    "random_bytes",
    "hints_past_the_answer",
    "hints_past_the_end",
]


@pytest.mark.parametrize("damage", ACTIVE_TIME_INDEX_DAMAGE)
def test_out_of_process_reader_finds_offsets_for_timestamps_through_a_damaged_time_index(
    fs: LocalFileSystem, root: str, written: WrittenLog, damage: str
) -> None:
    path = written.path + ".timeindex"
    original = fs.read_bytes(path)
    damaged: bytes | None
    if damage == "deleted":
        damaged = None
    elif damage == "odd_length":
        damaged = original[:-3]
    elif damage == "random_bytes":
        damaged = random.Random(3).randbytes(32)
    elif damage == "hints_past_the_answer":
        # "every record below offset 9 has a timestamp <= 0": false, and well formed
        damaged = _index_bytes([(0, 9)])
    else:
        damaged = _index_bytes([(0, written.records + 100)])
    _damage_file(path, damaged)
    records = _expected(written.records)
    view = PartitionReader(fs, root, TOPIC, 0).view()
    for target in _timestamp_targets(records):
        assert view.offset_for_timestamp(target) == _expected_offset_for_timestamp(
            records, target
        ), target


def _rolled_unsealed_log(fs: LocalFileSystem, root: str) -> tuple[PartitionLog, WrittenLog]:
    """An open writer (auto_seal off) whose first segment is rolled but still .arrow."""
    log = _open(fs, root, auto_seal=False)
    start = 0
    for n in BATCH_SIZES:
        log.append(_batch(start, n))
        start += n
    log.roll()
    log.append(_batch(start, 2))
    path = _arrow_path(root)
    assert not log.manifest.segments[0].sealed
    return log, WrittenLog(path, fs.read_bytes(path), scan(fs.read_buffer(path), 0))


def test_writer_reads_a_rolled_unsealed_segment_through_a_damaged_offset_index(
    fs: LocalFileSystem, root: str
) -> None:
    log, rolled = _rolled_unsealed_log(fs, root)
    try:
        _replace_file(
            rolled.path + ".index",
            _active_index_damage("negative_positions", rolled, b"", random.Random(0)),
        )
        expected = _expected(rolled.records + 2)
        for start in range(rolled.records + 3):
            assert _read_all(log, start) == expected[start:], start
    finally:
        log.close()


def test_writer_finds_offsets_for_timestamps_in_a_rolled_segment_with_a_damaged_time_index(
    fs: LocalFileSystem, root: str
) -> None:
    log, rolled = _rolled_unsealed_log(fs, root)
    try:
        _replace_file(rolled.path + ".timeindex", _index_bytes([(0, 9)]))
        records = _expected(rolled.records + 2)
        for target in _timestamp_targets(records):
            expected = _expected_offset_for_timestamp(records, target)
            assert log.offset_for_timestamp(target) == expected, target
    finally:
        log.close()


# ---------------------------------------------------------------------- sealed indexes


@dataclass(frozen=True)
class SealedLog:
    directory: str
    name: str
    records: int


def _write_sealed_log(fs: LocalFileSystem, root: str) -> SealedLog:
    """20 records sealed in row groups of 4 (five index entries), 3 more in the active."""
    log = _open(fs, root, row_group_rows=4)
    log.append(_batch(0, 7))
    log.append(_batch(7, 13))
    log.roll()
    log.append(_batch(20, 3))
    log.close()
    name = names.segment_name(0)
    assert log.manifest.segments[0].name == name
    return SealedLog(_partition(root), name, 23)


@pytest.fixture
def sealed(fs: LocalFileSystem, root: str) -> SealedLog:
    return _write_sealed_log(fs, root)


SEALED_INDEX_DAMAGE = [
    (suffix, damage)
    for suffix in (".index", ".timeindex")
    for damage in ("deleted", "odd_length", "random_bytes", "well_formed_but_wrong")
]


def _damage_sealed_index(fs: LocalFileSystem, sealed: SealedLog, suffix: str, damage: str) -> None:
    path = f"{sealed.directory}/{sealed.name}{suffix}"
    original = fs.read_bytes(path)
    damaged: bytes | None
    if damage == "deleted":
        damaged = None
    elif damage == "odd_length":
        damaged = original + b"\x01\x02\x03"
    elif damage == "random_bytes":
        damaged = random.Random(suffix).randbytes(len(original))
    elif suffix == ".index":
        # every row group shifted by one: offsets would be served from the wrong group
        damaged = _index_bytes((4 * i, i + 1) for i in range(5))
    else:
        # "no record below offset 16 has a timestamp >= 0": false
        damaged = _index_bytes([(0, 16)])
    assert damaged != original
    _damage_file(path, damaged)


@pytest.mark.parametrize(("suffix", "damage"), SEALED_INDEX_DAMAGE)
def test_damaged_sealed_index_is_detected(
    fs: LocalFileSystem, sealed: SealedLog, suffix: str, damage: str
) -> None:
    assert SealedSegment(fs, sealed.directory, sealed.name).indexes_on_disk_valid()
    _damage_sealed_index(fs, sealed, suffix, damage)
    assert not SealedSegment(fs, sealed.directory, sealed.name).indexes_on_disk_valid()


@pytest.mark.parametrize(("suffix", "damage"), SEALED_INDEX_DAMAGE)
def test_sealed_segment_serves_indexes_from_its_footer_when_its_files_are_damaged(
    fs: LocalFileSystem, sealed: SealedLog, suffix: str, damage: str
) -> None:
    _damage_sealed_index(fs, sealed, suffix, damage)
    seg = SealedSegment(fs, sealed.directory, sealed.name)
    try:
        expected_oidx, expected_tidx = indexes_from_metadata(seg.metadata)
        assert len(expected_oidx) == 5
        assert seg.offset_index == expected_oidx
        assert seg.time_index == expected_tidx
    finally:
        seg.close()


@pytest.mark.parametrize(("suffix", "damage"), SEALED_INDEX_DAMAGE)
def test_reads_by_offset_stay_correct_with_a_damaged_sealed_index(
    fs: LocalFileSystem, root: str, sealed: SealedLog, suffix: str, damage: str
) -> None:
    _damage_sealed_index(fs, sealed, suffix, damage)
    expected = _expected(sealed.records)
    with _reopened(fs, root, row_group_rows=4) as log:
        for start in range(sealed.records + 1):
            assert _read_all(log, start) == expected[start:], start
    view = PartitionReader(fs, root, TOPIC, 0).view()
    for start in range(sealed.records + 1):
        assert _records(view.batches(start)) == expected[start:], start


@pytest.mark.parametrize(("suffix", "damage"), SEALED_INDEX_DAMAGE)
def test_offset_for_timestamp_stays_correct_with_a_damaged_sealed_index(
    fs: LocalFileSystem, root: str, sealed: SealedLog, suffix: str, damage: str
) -> None:
    _damage_sealed_index(fs, sealed, suffix, damage)
    records = _expected(sealed.records)
    with _reopened(fs, root, row_group_rows=4) as log:
        for target in _timestamp_targets(records):
            expected = _expected_offset_for_timestamp(records, target)
            assert log.offset_for_timestamp(target) == expected, target
    view = PartitionReader(fs, root, TOPIC, 0).view()
    for target in _timestamp_targets(records):
        expected = _expected_offset_for_timestamp(records, target)
        assert view.offset_for_timestamp(target) == expected, target


def test_rewriting_damaged_sealed_indexes_makes_them_valid_again(
    fs: LocalFileSystem, sealed: SealedLog
) -> None:
    _damage_sealed_index(fs, sealed, ".index", "well_formed_but_wrong")
    _damage_sealed_index(fs, sealed, ".timeindex", "random_bytes")
    SealedSegment(fs, sealed.directory, sealed.name).write_indexes()
    seg = SealedSegment(fs, sealed.directory, sealed.name)
    assert seg.indexes_on_disk_valid()
    expected_oidx, expected_tidx = indexes_from_metadata(seg.metadata)
    assert OffsetIndex.load(fs, f"{seg.path}.index") == expected_oidx
    assert TimeIndex.load(fs, f"{seg.path}.timeindex") == expected_tidx
