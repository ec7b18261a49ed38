"""Rebuilding a cache from the committed tail (``storage.tail.rebuild``): the chain of a
segment's chunks (overlaps taken once, a gap ends it), and a cache file longer than what
was committed cut back to it - what lies past was never acknowledged."""

from __future__ import annotations

from pathlib import Path

from sparklog.storage.active import FILE_HEADER_SIZE
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records, normalize
from sparklog.storage.tail.objects import TailEntry
from sparklog.storage.tail.rebuild import chain, committed_end

from .conftest import S3Root


def _chunk(start: int, end: int, base: int, nxt: int) -> TailEntry:
    return TailEntry("t", 0, 1, "s.arrow", start, end, base, nxt, "wal/n1/1.wal", 0)


def test_overlapping_chunks_are_taken_once_and_a_gap_ends_the_chain() -> None:
    h = FILE_HEADER_SIZE
    a, again, b, after_gap = (_chunk(h, 100, 0, 5), _chunk(h, 160, 0, 8),
                              _chunk(100, 200, 5, 10), _chunk(300, 400, 15, 20))  # fmt: skip
    links = chain([b, after_gap, a, again])
    assert [(e, first) for e, first in links] == [(again, h), (b, 160)]
    assert committed_end([b, after_gap, a, again]) == (200, 10)


def test_a_cache_file_longer_than_the_committed_tail_is_cut_back(
    s3_root: S3Root, tmp_path: Path
) -> None:
    fs = s3_root.tiered(tmp_path / "cache")
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
    plog.append(make_records([b"committed"] * 3))
    tail.close()  # the broker dies: what follows is written to its cache, never committed
    lost = normalize(make_records([b"lost"] * 2), base_offset=plog.log_end_offset, now_ms=0,
                     log_append_time=False)  # fmt: skip
    plog._active.append(lost)  # in the cache file only: no round takes it any more
    tail2 = s3_root.embedded_tail()
    again = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail2)
    try:
        assert again.log_end_offset == 3
        values = [v for b in again.batches(0) for v in b.column("value").to_pylist()]
        assert values == [b"committed"] * 3
    finally:
        again.close()
        tail2.close()
