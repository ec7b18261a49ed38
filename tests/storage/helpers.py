"""Small helpers shared by storage tests (no test logic of their own)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from sparklog.storage.config import TopicConfig
from sparklog.storage.fs import FileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records


def open_log(fs: FileSystem, root: str, **configs: str | int) -> PartitionLog:
    config = TopicConfig.from_mapping({k.replace("_", "."): v for k, v in configs.items()})
    return PartitionLog.open(fs, root, "t", 0, config)


def records(start: int, n: int, *, ts0: int = 1_000_000) -> pa.RecordBatch:
    """``n`` records whose value names their writer sequence ``start + i``."""
    return make_records(
        [b"v%d" % i for i in range(start, start + n)],
        keys=[b"k%d" % (i % 7) for i in range(start, start + n)],
        timestamps=[ts0 + i for i in range(start, start + n)],
    )


def rows(batches: Iterable[pa.RecordBatch]) -> list[dict[str, object]]:
    return [r for b in batches for r in b.to_pylist()]


def values(batches: Iterable[pa.RecordBatch]) -> list[bytes]:
    return [v for b in batches for v in b.column("value").to_pylist()]


def offsets(batches: Iterable[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


#: points of the seal race, covered by test_seal_race.py rather than by test_crash_points.py's
#: generic cases
RACE_POINTS = ("seal.refused",)
