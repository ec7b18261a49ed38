"""``GroupOffsetsListener`` (``sparklog.datasource.progress``): it commits sparklog's
sources' groups, leaves every other source alone, and a script that exits without
``spark.stop()`` ends quietly."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.listener import StreamingQueryListener

import sparklog.spark
from sparklog.storage import Storage
from sparklog.storage.records import make_records
from sparklog_testkit.processes import BrokerProcess

pytestmark = pytest.mark.spark

EXIT_JOB = Path(__file__).with_name("stream_exit_job.py")


class _Terminations(StreamingQueryListener):
    """Records the ids of terminated queries. Spark's listener bus calls its listeners one
    after another for each event, in order, so once this listener (added after
    ``register``'s) has heard a query terminate, ``register``'s has handled every event of
    that query."""

    def __init__(self) -> None:
        self.ended: set[str] = set()
        self.changed = threading.Condition()

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryProgress(self, event: Any) -> None:
        return None

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        with self.changed:
            self.ended.add(str(event.id))
            self.changed.notify_all()

    def wait(self, ids: set[str], timeout: float = 120.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: ids <= self.ended, timeout), (ids, self.ended)


def test_other_sources_in_the_session_are_left_alone(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A file source reports no latest offset (PySpark gives the string 'None'), a rate
    # source a bare number: neither is sparklog's report, and neither may be parsed as one.
    sparklog.spark.register(spark)
    root = str(tmp_path / "data")
    storage = Storage(root)
    storage.topics.create("t", 1)
    log = storage.open_log("t", 0)
    log.append(make_records([b"a", b"b"]))
    log.close()
    parquet = str(tmp_path / "parquet")
    spark.range(5).write.parquet(parquet)
    heard = _Terminations()
    spark.streams.addListener(heard)
    try:
        with caplog.at_level(logging.WARNING, logger="sparklog"):
            queries = [
                spark.readStream.format("sparklog").option("subscribe", "t")
                .option("startingOffsets", "earliest").load(root),
                spark.readStream.schema("id long").parquet(parquet),
                spark.readStream.format("rate").option("rowsPerSecond", "10").load(),
            ]  # fmt: skip
            started = [
                df.writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / f"checkpoint-{i}"))
                .trigger(availableNow=True)
                .start()
                for i, df in enumerate(queries)
            ]
            for q in started:
                q.awaitTermination(120)
                assert q.exception() is None
            heard.wait({str(q.id) for q in started})
    finally:
        spark.streams.removeListener(heard)
    assert all(q.lastProgress is not None for q in started)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("sparklog")]
    assert said == []  # no other source's offsets were read as sparklog's


def test_a_group_is_committed_beside_file_and_rate_streams(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sparklog query with a group runs at the same time as a Parquet file stream and a
    rate stream of the same session: the listener commits the sparklog batch's end to the
    group (its next batch is an hour away, so the source itself never does), and reads
    nothing of the other queries' progress, whose offsets are no sparklog offsets."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaPartition

    broker = BrokerProcess(str(tmp_path / "broker")).start()
    parquet = str(tmp_path / "parquet")
    spark.range(5).write.parquet(parquet)
    heard = _Terminations()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(40):
            p.produce("mixed", value=b"v%d" % i)
        assert p.flush(20) == 0
        sparklog.spark.register(spark)
        spark.streams.addListener(heard)
        with caplog.at_level(logging.WARNING, logger="sparklog"):
            frames = [
                (
                    spark.readStream.format("sparklog")
                    .option("subscribe", "mixed")
                    .option("startingOffsets", "earliest")
                    .option("group", "beside-others")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .load(broker.data_dir),
                    "1 hour",  # one batch now, the next one after the test
                ),
                (spark.readStream.schema("id long").parquet(parquet), "200 milliseconds"),
                (
                    spark.readStream.format("rate").option("rowsPerSecond", "10").load(),
                    "200 milliseconds",
                ),
            ]
            started = [
                df.writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / f"checkpoint-{i}"))
                .trigger(processingTime=every)
                .start()
                for i, (df, every) in enumerate(frames)
            ]
            try:
                c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "beside-others"})
                deadline = time.monotonic() + 120
                committed = -1
                while committed != 40 or any(len(q.recentProgress) < 3 for q in started[1:]):
                    assert time.monotonic() < deadline, (committed, started[1].recentProgress)
                    assert all(q.isActive for q in started), [q.exception() for q in started]
                    [tp] = c.committed([KafkaPartition("mixed", 0)], timeout=10)
                    committed = tp.offset
                    time.sleep(0.2)
                c.close()
            finally:
                for q in started:
                    q.stop()
            heard.wait({str(q.id) for q in started})
    finally:
        spark.streams.removeListener(heard)
        broker.stop()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("sparklog")]
    assert said == []  # neither a failed commit nor another source's offsets misread


def test_a_script_that_exits_without_stopping_spark_ends_quietly(tmp_path: Path) -> None:
    """The listener ``register`` adds must be gone before the Python side is: Spark
    delivers a stopped query's last events after the script's last line, and at JVM
    shutdown, when no Python is left to answer (before: a Py4J stack trace per event)."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    out = subprocess.run(
        [sys.executable, str(EXIT_JOB), str(tmp_path / "data")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "stopped" in out.stdout
    assert " ERROR " not in out.stderr, out.stderr[-5000:]
    assert "Traceback" not in out.stderr and "Py4J" not in out.stderr, out.stderr[-5000:]
