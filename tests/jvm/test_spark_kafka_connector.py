"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10 and the Java
kafka-clients it brings) against a sparklog broker, unchanged: the migration path of
docs/jvm.md. A batch read with ending offsets, assign, a stream with maxOffsetsPerTrigger
and Trigger.AvailableNow, and the sink; what it reads is checked against what
confluent-kafka had acknowledged, and what it writes against sparklog's own source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import sparklog.spark
from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.jvm]

TOPIC = "orders"
PARTITIONS = 3
RECORDS = 600

Acked = dict[tuple[int, int], tuple[bytes, bytes]]  # (partition, offset) -> (key, value)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    data = str(tmp_path / "data")
    Storage(data).topics.create(TOPIC, PARTITIONS, {})
    b = BrokerProcess(data).start()
    yield b
    b.stop()
    b.kill()


def _produce(bootstrap: str, n: int = RECORDS, topic: str = TOPIC) -> Acked:
    acked: Acked = {}

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v%05d" % i, b"k%03d" % (i % 50), on_delivery=done)
    assert p.flush(30) == 0
    return acked


def _kafka(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _rows(df: Any) -> Acked:
    rows = df.select("partition", "offset", "key", "value").collect()
    out = {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in rows}
    assert len(out) == len(rows), "a record was read twice"
    return out


def test_batch_read_with_ending_offsets_returns_every_acknowledged_record(
    spark: Any, broker: BrokerProcess
) -> None:
    acked = _produce(broker.bootstrap)
    df = _kafka(spark, broker, subscribe=TOPIC, startingOffsets="earliest",
                endingOffsets="latest")  # fmt: skip
    assert _rows(df) == acked
    assert set(df.columns) >= {"key", "value", "topic", "partition", "offset", "timestamp"}


def test_batch_read_with_assign_and_json_offsets(spark: Any, broker: BrokerProcess) -> None:
    acked = _produce(broker.bootstrap)
    df = _kafka(
        spark, broker, assign='{"orders": [0, 2]}',
        startingOffsets='{"orders": {"0": 10, "2": -2}}',
        endingOffsets='{"orders": {"0": 20, "2": -1}}',
    )  # fmt: skip
    want = {k: v for k, v in acked.items() if (k[0] == 0 and 10 <= k[1] < 20) or k[0] == 2}
    assert _rows(df) == want


def test_stream_with_max_offsets_per_trigger_and_available_now(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    acked = _produce(broker.bootstrap)
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    batches: list[int] = []
    seen: Acked = {}

    def each(df: Any, batch_id: int) -> None:
        got = _rows(df)
        assert not set(got) & set(seen), f"batch {batch_id} read records again"
        seen.update(got)
        batches.append(len(got))

    q = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    assert seen == acked
    assert len(batches) >= RECORDS // 100 and max(batches) <= 100


def test_sink_writes_records_sparklog_serves_back(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    Storage(broker.data_dir).topics.create("copy", 2, {})
    rows = [(b"k%d" % (i % 7), b"value-%d" % i) for i in range(200)]
    df = spark.createDataFrame(rows, "key binary, value binary")
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", "copy")
        .save()
    )
    back = _kafka(spark, broker, subscribe="copy", startingOffsets="earliest",
                  endingOffsets="latest")  # fmt: skip
    assert sorted(_rows(back).values()) == sorted(rows)
    sparklog.spark.register(spark)
    ours = spark.read.format("sparklog").option("subscribe", "copy").load(broker.data_dir)
    assert sorted((bytes(r.key), bytes(r.value)) for r in ours.collect()) == sorted(rows)
