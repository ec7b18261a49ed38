"""``format("sparklog").load("s3://...")`` and the Spark jobs on a storage root on S3 (the
``s3_server`` fixture: SeaweedFS), built as a broker with its log there leaves it: a log
written on a local disk, then its bucket-side files copied
(``tests.support.s3.copy_to_bucket``). Readers see the sealed prefix of each partition.

The Spark session gets the endpoint and credentials as the standard ``AWS_*`` variables:
in the driver's environment, and in ``sc.environment`` (what ``spark.executorEnv.*`` fills)
before ``sparklog.spark.register``, which is how they reach the Python workers that plan a
stream and read its tasks (in local[2] as on a cluster). The planning test drives the
stream reader as Spark does, in this process, to count its requests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparklog.spark
from sparklog.datasource.options.reads import stream_options
from sparklog.datasource.scan import read_partition
from sparklog.datasource.stream import SparkLogStreamReader
from sparklog.storage import Storage
from sparklog.storage.fs.s3 import total_requests

from ..support.export import run as export
from ..support.s3 import SeaweedS3, copy_to_bucket, write_log


def _uri(server: SeaweedS3) -> str:
    return f"s3://{server.bucket}/{uuid.uuid4().hex}"


@pytest.fixture
def aws_env(s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> SeaweedS3:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


def test_micro_batch_planning_lists_nothing_in_the_steady_state(
    aws_env: SeaweedS3, tmp_path: Path
) -> None:
    """A stream's planning (latestOffset, reportLatestOffset, partitions, commit), batch
    after batch while new segments are sealed into the bucket: no LIST once the first batch
    has found the directories, and each batch's records are read by its tasks."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    local, uri = str(tmp_path / "local"), _uri(aws_env)
    values = write_log(local)
    copy_to_bucket(local, uri, aws_env.env())
    reader = SparkLogStreamReader(
        stream_options({"path": uri, "subscribe": "t", "startingOffsets": "earliest"})
    )
    start = reader.initialOffset()
    read: list[bytes] = []
    lists = []
    for _ in range(4):
        before = total_requests()
        end = reader.latestOffset(start, ReadAllAvailable())
        reader.reportLatestOffset()
        ranges = reader.partitions(start, end)
        reader.commit(end)
        after = total_requests()
        lists.append(after["LIST"] - before["LIST"])
        assert after["HEAD"] == before["HEAD"]
        for r in ranges:
            read += [v for b in read_partition(r) for v in b.column("value").to_pylist()]
        start = end
        values += write_log(local, sealed=1, rolled=0)  # the old active segment seals too
        copy_to_bucket(local, uri, aws_env.env())
    assert lists == [0, 0, 0, 0]
    sealed_end = Storage(uri).reader("t", 0).view().high_watermark
    assert read == values[: start["t"]["0"]]
    assert start["t"]["0"] < sealed_end  # the last copy is not planned yet


# ------------------------------------------------------------------------------------ Spark


@pytest.fixture(scope="module")
def s3_spark(spark: Any, s3_server: SeaweedS3) -> Iterator[Any]:
    """The run's SparkSession with the S3 server's ``AWS_*`` variables in the driver and in
    ``sc.environment``, and ``format("sparklog")`` registered after them (see the module
    docstring); removed again at the end of the module."""
    env = s3_server.env()
    sc = spark.sparkContext
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
            mp.setitem(sc.environment, name, value)
        sparklog.spark.register(spark)
        yield spark
    sparklog.spark.register(spark)


@pytest.mark.spark
def test_spark_read_and_read_stream_of_an_s3_root(
    s3_spark: Any, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    """A batch read and an AvailableNow stream both read the sealed prefix, in executors'
    Python workers that got the endpoint and credentials from ``sc.environment``."""
    local, uri = str(tmp_path / "local"), _uri(s3_server)
    values = write_log(local)
    copy_to_bucket(local, uri, s3_server.env())
    df = s3_spark.read.format("sparklog").option("subscribe", "t").load(uri)
    rows = sorted((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())
    assert rows == list(enumerate(values[:60]))

    batches: list[list[int]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        batches.append(sorted(r.offset for r in batch.select("offset").collect()))

    q = (
        s3_spark.readStream.format("sparklog")
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .load(uri)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    assert [o for b in batches for o in b] == list(range(60))


@pytest.mark.spark
def test_the_compaction_and_export_jobs_on_an_s3_root(
    s3_spark: Any, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    """Compaction rewrites the sealed section in the bucket (new Parquet segments, no index
    objects) and commits there; the export job then reads the compacted log from S3 into a
    local Parquet table."""
    from sparklog.compaction.compactor import compact

    local, uri = str(tmp_path / "local"), _uri(s3_server)
    write_log(local, configs={"cleanup.policy": "compact"}, keys=5)
    copy_to_bucket(local, uri, s3_server.env())
    report = compact(s3_spark, uri, ["t"])
    assert [o.status for o in report.outcomes] == ["compacted"], report.outcomes
    storage = Storage(uri)
    view = storage.reader("t", 0).view()
    assert view.high_watermark == 60
    kept = [(int(o), bytes(v)) for b in view.batches(0) for o, v in zip(
        b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)]  # fmt: skip
    assert kept == [(o, b"v%d" % o) for o in range(55, 60)]  # the last of each key
    files = storage.fs.listdir(view.path)
    assert not [f for f in files if f.endswith((".index", ".timeindex", ".arrow"))], files

    out = str(tmp_path / "export")
    export(s3_spark, uri, out, "--format", "parquet")
    rows = s3_spark.read.parquet(out).select("offset", "value").collect()
    assert sorted((r.offset, bytes(r.value)) for r in rows) == kept
