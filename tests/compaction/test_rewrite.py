"""The per-segment steps that run inside Spark tasks, called directly (no Spark)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from sparklog.compaction import rewrite
from sparklog.compaction.rewrite import GroupTask, SegmentTask
from sparklog.errors import CompactionOutputError
from sparklog.storage import Storage, names
from sparklog.storage.sealed import SealedSegment

from .helpers import TOPIC, Model, append, rows


@pytest.fixture
def storage(root: str) -> Storage:
    s = Storage(root)
    s.topics.create(TOPIC, 1, {"cleanup.policy": "compact"})
    return s


def _task(storage: Storage, name: str, base: int, end: int, below: int = 0) -> SegmentTask:
    return SegmentTask(0, 0, storage.root, TOPIC, 0, name, base, end, below)


def _written(storage: Storage) -> Model:
    model = Model()
    keys = [b"a", b"b", b"a", None, b"c", b"b", b"a", b"c"]
    values = [b"1", b"2", b"3", b"keyless", None, b"6", b"7", b"8"]
    append(storage, model, 0, keys, values, ts=1000)
    return model


def test_last_offsets_gives_each_key_its_last_offset_and_skips_keyless_records(
    storage: Storage,
) -> None:
    _written(storage)
    task = _task(storage, names.segment_name(0), 0, 8)
    out = pa.Table.from_batches(list(rewrite.last_offsets(task)))
    got = dict(zip(out.column("key").to_pylist(), out.column("offset").to_pylist(), strict=True))
    assert got == {b"a": 6, b"b": 5, b"c": 7}
    assert set(out.column("seg").to_pylist()) == {0}


def test_last_offsets_merges_partial_dedupes_of_a_large_segment(storage: Storage) -> None:
    model = Model()
    keys = [b"k%d" % (i % 13) for i in range(500)]
    append(storage, model, 0, keys, [b"v%d" % i for i in range(500)], ts=0)
    task = _task(storage, names.segment_name(0), 0, 500)
    out = pa.Table.from_batches(list(rewrite.last_offsets(task, dedupe_rows=7)))
    got = dict(zip(out.column("key").to_pylist(), out.column("offset").to_pylist(), strict=True))
    assert got == {b"k%d" % k: max(i for i in range(500) if i % 13 == k) for k in range(13)}


def _chunk_rows(chunks: list[tuple[int, int, int, bytes]]) -> list[tuple[int, bytes | None]]:
    out = []
    for _first, _n, _removed, data in chunks:
        if data:
            out += [(r[0], r[2]) for r in rows(pa.ipc.open_stream(data))]
    return out


def test_kept_chunks_keep_exactly_the_winners(storage: Storage) -> None:
    _written(storage)
    task = _task(storage, names.segment_name(0), 0, 8)
    chunks = list(rewrite.kept_chunks(task, pa.array([2, 4, 7], pa.int64())))
    assert _chunk_rows(chunks) == [(2, b"3"), (4, None), (7, b"8")]
    assert chunks[0][0] == 2 and sum(c[1] for c in chunks) == 3


def test_kept_chunks_drop_tombstones_below_the_horizon_and_count_them(storage: Storage) -> None:
    _written(storage)
    below = _task(storage, names.segment_name(0), 0, 8, below=5)
    chunks = list(rewrite.kept_chunks(below, pa.array([2, 4, 7], pa.int64())))
    assert _chunk_rows(chunks) == [(2, b"3"), (7, b"8")]
    assert sum(c[2] for c in chunks) == 1
    above = _task(storage, names.segment_name(0), 0, 8, below=4)
    assert _chunk_rows(list(rewrite.kept_chunks(above, pa.array([4], pa.int64())))) == [(4, None)]


def test_a_segment_whose_survivors_are_all_expired_tombstones_reports_them(
    storage: Storage,
) -> None:
    _written(storage)
    task = _task(storage, names.segment_name(0), 0, 8, below=8)
    assert list(rewrite.kept_chunks(task, pa.array([4], pa.int64()))) == [(0, 0, 1, b"")]


def _group(storage: Storage, name: str, base: int, end: int) -> GroupTask:
    return GroupTask(0, storage.root, TOPIC, 0, name, base, end)


def test_group_writer_writes_a_sealed_segment_of_the_chunks(storage: Storage) -> None:
    _written(storage)
    src = _task(storage, names.segment_name(0), 0, 8)
    chunks = list(rewrite.kept_chunks(src, pa.array([2, 4, 7], pa.int64())))
    writer = rewrite.GroupWriter(_group(storage, names.segment_name(0, generation=1), 0, 8))
    for _first, _n, removed, data in chunks:
        writer.write_chunk(data, removed)
    result = writer.close()
    assert (result.records, result.first_offset, result.last_offset) == (3, 2, 7)
    assert result.first_tombstone == 4
    assert (result.min_timestamp, result.max_timestamp) == (1002, 1007)
    path = names.partition_dir(storage.root, TOPIC, 0)
    seg = SealedSegment(storage.fs, path, result.name)
    assert [(r[0], r[2]) for r in rows(seg.read(0))] == [(2, b"3"), (4, None), (7, b"8")]
    assert seg.indexes_on_disk_valid()
    seg.close()


def test_group_writer_refuses_chunks_out_of_order_or_outside_its_range(storage: Storage) -> None:
    _written(storage)
    src = _task(storage, names.segment_name(0), 0, 8)
    late = next(rewrite.kept_chunks(src, pa.array([6], pa.int64())))[3]
    early = next(rewrite.kept_chunks(src, pa.array([1], pa.int64())))[3]
    writer = rewrite.GroupWriter(_group(storage, names.segment_name(0, generation=1), 0, 8))
    writer.write_chunk(late)
    with pytest.raises(CompactionOutputError, match="arrive after 6"):
        writer.write_chunk(early)
    writer.abandon()
    short = rewrite.GroupWriter(_group(storage, names.segment_name(0, generation=2), 0, 5))
    with pytest.raises(CompactionOutputError, match="past the output's end 5"):
        short.write_chunk(late)
    short.abandon()


def test_a_retried_task_writes_under_a_name_of_its_own(storage: Storage) -> None:
    _written(storage)
    planned = names.segment_name(40, generation=3)
    assert rewrite.attempt_name(planned, 0) == planned
    assert rewrite.attempt_name(planned, 2) == names.segment_name(40, generation=5)
    writer = rewrite.GroupWriter(_group(storage, planned, 40, 50), attempt=1)
    assert writer.name == names.segment_name(40, generation=4)
    writer.abandon()


def test_write_empty_makes_a_readable_segment_with_no_records(storage: Storage) -> None:
    _written(storage)
    result = rewrite.write_empty(_group(storage, names.segment_name(0, generation=1), 0, 8), 2)
    assert (result.records, result.tombstones_removed, result.first_tombstone) == (0, 2, -1)
    path = names.partition_dir(storage.root, TOPIC, 0)
    assert os.path.exists(os.path.join(path, names.offset_index_name(result.name)))
    seg = SealedSegment(storage.fs, path, result.name)
    assert list(seg.read(0)) == []
    seg.close()
