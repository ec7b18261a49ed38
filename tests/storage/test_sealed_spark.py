"""Sealed segments are plain Parquet that Spark's own reader opens."""

from __future__ import annotations

from typing import Any

import pytest

from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records

pytestmark = pytest.mark.spark


def test_spark_reads_sealed_segments_natively(fs: LocalFileSystem, root: str, spark: Any) -> None:
    log = PartitionLog.open(fs, root, "t", 0, TopicConfig(), row_group_rows=50)
    log.append(
        make_records(
            [b"v%d" % i for i in range(120)],
            keys=[None if i % 10 == 0 else b"k%d" % (i % 3) for i in range(120)],
            timestamps=[1_700_000_000_000 + i for i in range(120)],
            headers=[[("h", b"%d" % i)] for i in range(120)],
        )
    )
    log.roll()
    paths = [f"{log.path}/{s.name}" for s in log.manifest.segments if s.sealed]
    df = spark.read.parquet(*paths)
    types = dict(df.dtypes)
    assert types["offset"] == "bigint"
    assert types["timestamp"] == "timestamp"
    assert types["key"] == "binary" and types["value"] == "binary"
    assert types["headers"] == "array<struct<key:string,value:binary>>"
    assert df.count() == 120
    assert df.where("key is null").count() == 12
    row = df.where("offset = 77").collect()[0]
    assert bytes(row["value"]) == b"v77"
    assert row["headers"][0]["key"] == "h"
    assert df.where("offset >= 100").count() == 20
