"""Helpers shared by the recovery tests (test_recovery*.py): writing a known log and
damaging its files."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sparklog.storage import names
from sparklog.storage.active import FrameHeader, scan
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records

TOPIC = "t"
#: index.interval.bytes=0 puts every frame in the active segment's indexes, so index
#: damage matters for every read.
CONFIG = TopicConfig(index_interval_bytes=0)
#: Batch sizes of the standard log: five frames, the middle one at index 2.
BATCH_SIZES = (3, 2, 4, 1, 3)
REPO_ROOT = Path(__file__).resolve().parents[2]

Record = tuple[int, bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]


# ---------------------------------------------------------------------- helpers


def _timestamp(seq: int) -> int:
    """Timestamps that are not monotonic in offset order (as Kafka's CreateTime allows)."""
    return 1_000_000 + ((seq * 7919) % 101) * 10


def _batch(start: int, n: int) -> pa.RecordBatch:
    seqs = range(start, start + n)
    return make_records(
        [b"v%d" % s for s in seqs],
        keys=[b"k%d" % (s % 5) for s in seqs],
        timestamps=[_timestamp(s) for s in seqs],
        headers=[[("seq", b"%d" % s)] for s in seqs],
    )


def _expected(n: int) -> list[Record]:
    """The first ``n`` records the standard log holds, as ``_records`` reads them back."""
    return [
        (s, b"k%d" % (s % 5), b"v%d" % s, _timestamp(s), [("seq", b"%d" % s)]) for s in range(n)
    ]


def _records(batches: Iterable[pa.RecordBatch]) -> list[Record]:
    out: list[Record] = []
    for b in batches:
        ts = b.column("timestamp").cast(pa.int64()).to_pylist()
        heads = [[(h["key"], h["value"]) for h in hs] for hs in b.column("headers").to_pylist()]
        out.extend(
            zip(
                b.column("offset").to_pylist(),
                b.column("key").to_pylist(),
                b.column("value").to_pylist(),
                ts,
                heads,
                strict=True,
            )
        )
    return out


def _partition(root: str) -> str:
    return names.partition_dir(root, TOPIC, 0)


def _arrow_path(root: str, base_offset: int = 0) -> str:
    return f"{_partition(root)}/{names.segment_name(base_offset, kind=names.ACTIVE_KIND)}"


def _open(fs: LocalFileSystem, root: str, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(fs, root, TOPIC, 0, CONFIG, **kwargs)  # type: ignore[arg-type]


@contextmanager
def _reopened(fs: LocalFileSystem, root: str, **kwargs: object) -> Iterator[PartitionLog]:
    log = _open(fs, root, **kwargs)
    try:
        yield log
    finally:
        log.close()


def _read_all(log: PartitionLog, start: int = 0) -> list[Record]:
    return _records(log.batches(start))


def _replace_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _expected_offset_for_timestamp(records: list[Record], target: int) -> int | None:
    return next((r[0] for r in records if r[3] >= target), None)


def _timestamp_targets(records: list[Record]) -> list[int]:
    stamps = sorted({r[3] for r in records})
    return sorted({t + d for t in stamps for d in (-1, 0, 1)} | {0, stamps[-1] + 100})


def _index_bytes(entries: Iterable[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack("<qq", k, v) for k, v in entries)


@dataclass(frozen=True)
class WrittenLog:
    """The standard log after a clean close: its active segment's bytes and frames."""

    path: str
    data: bytes
    frames: list[FrameHeader]

    @property
    def records(self) -> int:
        return self.frames[-1].next_offset


def _write_standard_log(fs: LocalFileSystem, root: str) -> WrittenLog:
    log = _open(fs, root)
    start = 0
    for n in BATCH_SIZES:
        log.append(_batch(start, n))
        start += n
    log.close()
    path = _arrow_path(root)
    data = fs.read_bytes(path)
    frames = scan(fs.read_buffer(path), 0)
    assert [h.record_count for h in frames] == list(BATCH_SIZES)
    return WrittenLog(path, data, frames)


def _frame_of(frames: list[FrameHeader], pos: int) -> int:
    return next(i for i, h in enumerate(frames) if h.position <= pos < h.end)


def _flip(data: bytes, pos: int) -> bytes:
    damaged = bytearray(data)
    damaged[pos] ^= 1 << (pos % 8)
    return bytes(damaged)
