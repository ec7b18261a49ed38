"""df.write / df.writeStream .format("sparklog"): the Kafka sink's columns, produced
through a real broker; exactly once across a killed and restarted streaming query."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

import sparklog.spark
from sparklog.datasource import ADMISSION_CONTROL
from sparklog.datasource.options.writes import write_options
from sparklog.datasource.producer import PartitionStream, cut_batches
from sparklog.datasource.sink_state import SinkState, StateStore
from sparklog.datasource.writer import CRASH_POINTS, TXN_CRASH_POINTS, assign_partitions, normalise
from sparklog.errors import OptionError, SinkWriteError
from sparklog.kafka.partitioner import murmur2_partition
from sparklog.storage import RECORD_SCHEMA, Storage

from ..broker.conftest import ROOT, BrokerProcess

SINK_JOB = Path(__file__).with_name("sink_job.py")


def stored(data_dir: str, topic: str) -> dict[int, pa.Table]:
    storage = Storage(data_dir)
    out = {}
    for p in range(storage.topics.get(topic).partitions):
        view = storage.reader(topic, p).view()
        out[p] = pa.Table.from_batches(list(view.batches(view.log_start_offset)), RECORD_SCHEMA)
    return out


# ---------------------------------------------------------------------------- pure parts


def _records(n: int, seed: int = 1) -> pa.Table:
    rng = random.Random(seed)
    values = [rng.randbytes(rng.randrange(1, 300)) for _ in range(n)]
    return pa.table(
        {
            "key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()),
                                                              ("value", pa.binary())]))),
        }
    )  # fmt: skip


def test_batches_do_not_depend_on_how_records_arrive() -> None:
    records = _records(40_000)
    whole = PartitionStream("t", 0, 100, 5, 0, batch_bytes=64 * 1024)
    whole.add(records)
    expected = whole.take_batches(final=True)
    rng = random.Random(3)
    pieces = PartitionStream("t", 0, 100, 5, 0, batch_bytes=64 * 1024)
    got: list[bytes] = []
    start = 0
    while start < records.num_rows:
        size = rng.randrange(1, 9000)
        pieces.add(records.slice(start, size))
        got += pieces.take_batches(final=False)
        start += size
    got += pieces.take_batches(final=True)

    def without_time(batch: bytes) -> bytes:  # the CRC and the two batch timestamps
        return batch[:17] + batch[21:27] + batch[43:]  # depend on when a batch was encoded

    assert len(expected) > 5
    assert pieces.next_sequence == whole.next_sequence == 100 + 40_000
    assert [without_time(b) for b in got] == [without_time(b) for b in expected]


def test_cut_batches_respects_the_byte_limit_and_keeps_every_record() -> None:
    records = _records(5000)
    cuts = cut_batches(records, 10_000)
    assert cuts[0][0] == 0 and cuts[-1][1] == 5000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts))
    sizes = [len(k) + len(v) + 16 for k, v in zip(records.column("key").to_pylist(),
                                                  records.column("value").to_pylist(),
                                                  strict=True)]  # fmt: skip
    for start, stop in cuts:
        assert stop - start == 1 or sum(sizes[start:stop]) <= 10_000


def test_partitions_explicit_then_by_key_then_round_robin() -> None:
    batch = pa.record_batch(
        {
            "key": pa.array([b"a", None, b"b", None, b"a", None], pa.binary()),
            "value": pa.array([b"v"] * 6, pa.binary()),
            "partition": pa.array([None, None, None, None, 2, 0], pa.int32()),
        }
    )
    parts = assign_partitions(normalise(batch, "t"), 3, round_robin_start=1).to_pylist()
    assert parts[0] == murmur2_partition(b"a", 3)  # by key
    assert parts[2] == murmur2_partition(b"b", 3)
    assert parts[4] == 2 and parts[5] == 0  # explicit wins
    assert [parts[1], parts[3]] == [1, 2]  # null keys: round robin from the start given


def test_a_partition_that_does_not_exist_is_refused() -> None:
    batch = pa.record_batch(
        {"value": pa.array([b"v"], pa.binary()), "partition": pa.array([5], pa.int32())}
    )
    with pytest.raises(SinkWriteError, match="partition 5 does not exist"):
        assign_partitions(normalise(batch, "t"), 3, 0)


def test_sink_state_round_trips_and_keeps_the_two_newest(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "ck" / "sparklog-sink"), 3)
    assert store.latest() is None
    for batch in range(4):
        store.save(SinkState(batch, 17, 0, {"t": {0: 10 * batch, 2: batch}}))
    assert store.latest() == SinkState(3, 17, 0, {"t": {0: 30, 2: 3}})
    assert sorted(os.listdir(store.dir)) == [f"{2:020d}.json", f"{3:020d}.json"]


def test_sink_identity_is_recorded_once(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "ck" / "sparklog-sink"), 0)
    ids = iter([(11, 0), (12, 0)])
    assert store.identity(lambda: next(ids)) == (11, 0)
    assert store.identity(lambda: next(ids)) == (11, 0)  # a retry gets the same producer


# ---------------------------------------------------------------------------- options


_TYPES = {
    "binary": BinaryType(),
    "string": StringType(),
    "int": IntegerType(),
    "array<string>": ArrayType(StringType()),
}


def _schema(ddl: str) -> StructType:
    """A StructType from ``name type, ...`` (the few types these tests use)."""
    fields = [c.strip().split(" ", 1) for c in ddl.split(",")]
    return StructType([StructField(n, _TYPES[t]) for n, t in fields])


@pytest.mark.parametrize(
    ("options", "ddl", "message"),
    [
        ({}, "value binary", "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "value binary", "topic"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t"}, "key binary", "'value' column"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t"}, "value int", "column 'value'"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t"}, "value binary, partition string",
         "column 'partition' must be int"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t"},
         "value binary, headers array<string>", "column 'headers'"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t", "path": "/x"}, "value binary",
         "not a path"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t", "colour": "red"}, "value binary",
         "unknown option"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "../etc"}, "value binary", "topic"),
        ({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.batch.size": "big"},
         "value binary", "kafka.batch.size"),
    ],
)  # fmt: skip
def test_bad_sink_options_and_columns_are_named(
    options: dict[str, str], ddl: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        write_options(options, _schema(ddl))


def test_checkpoint_location_places_the_sink_state(tmp_path: Path) -> None:
    opts = write_options(
        {"kafka.bootstrap.servers": "h:1", "topic": "t", "checkpointLocation": str(tmp_path)},
        _schema("value binary"),
    )
    assert opts.state_dir == str(tmp_path / "sparklog-sink")
    assert write_options({"kafka.bootstrap.servers": "h:1", "topic": "t"},
                         _schema("value binary")).state_dir is None  # fmt: skip


# ---------------------------------------------------------------------------- Spark


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    b = BrokerProcess(str(tmp_path / "broker")).start()
    yield b
    b.stop()


@pytest.mark.spark
def test_batch_write_round_trip_with_kafka_partitioning(spark: Any, broker: Any) -> None:
    sparklog.spark.register(spark)
    from sparklog.kafka import admin as kc
    from sparklog.kafka.client import KafkaClient

    with KafkaClient(broker.bootstrap) as c:
        kc.create_topic(c, "w", 3, {})
    df = spark.range(600).selectExpr(
        "IF(id % 5 = 0, NULL, concat('user-', id % 40)) AS key",
        "concat('v', id) AS value",
        "array(named_struct('key', 'n', 'value', cast(cast(id AS string) AS binary))) AS headers",
    )
    (df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", "w").mode("append").save())  # fmt: skip
    got = stored(broker.data_dir, "w")
    rows = []
    for p, table in got.items():
        columns = [table.column(c).to_pylist() for c in ("key", "value", "headers")]
        rows += [(p, *row) for row in zip(*columns, strict=True)]
    assert sorted(r[2] for r in rows) == sorted(b"v%d" % i for i in range(600))
    for p, key, value, headers in rows:
        assert headers == [{"key": "n", "value": value[1:]}]
        if key is not None:
            assert p == murmur2_partition(key, 3)  # where a Kafka producer would put it
    nulls = Counter(p for p, key, _, _ in rows if key is None)
    assert sorted(nulls) == [0, 1, 2] and sum(nulls.values()) == 120  # spread round robin
    # and a Kafka consumer reads what Spark wrote
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe(["w"])
    seen = 0
    for _ in range(60):
        seen += sum(1 for m in c.consume(600, 1.0) if not m.error())
        if seen >= 600:
            break
    c.close()
    assert seen == 600


@pytest.mark.spark
def test_topic_and_partition_columns(spark: Any, broker: Any) -> None:
    sparklog.spark.register(spark)
    from sparklog.kafka import admin as kc
    from sparklog.kafka.client import KafkaClient

    with KafkaClient(broker.bootstrap) as c:
        kc.create_topic(c, "left", 2, {})
        kc.create_topic(c, "right", 2, {})
    df = spark.createDataFrame(
        [("left", 1, "a"), ("right", 0, "b"), ("right", 1, "c"), ("left", 1, "d")],
        "topic string, partition int, value string",
    )
    df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap).mode(
        "append"
    ).save()
    left, right = stored(broker.data_dir, "left"), stored(broker.data_dir, "right")
    assert left[0].num_rows == 0 and right[0].column("value").to_pylist() == [b"b"]
    assert sorted(left[1].column("value").to_pylist()) == [b"a", b"d"]
    assert right[1].column("value").to_pylist() == [b"c"]


@pytest.mark.spark
def test_a_null_topic_fails_the_write_with_a_clear_error(spark: Any, broker: Any) -> None:
    sparklog.spark.register(spark)
    df = spark.createDataFrame([(None, "a")], "topic string, value string")
    with pytest.raises(Exception, match="null topic"):
        df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap).mode(
            "append"
        ).save()


@pytest.mark.spark
def test_bad_options_fail_before_any_task(spark: Any, broker: Any) -> None:
    sparklog.spark.register(spark)
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        df.write.format("sparklog").option("topic", "t").mode("append").save()
    with pytest.raises(Exception, match="cannot be overwritten"):
        df.write.format("sparklog").option("topic", "t").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).mode("overwrite").save()


@pytest.mark.spark
def test_the_default_save_mode_appends_as_the_kafka_sink_does(spark: Any, broker: Any) -> None:
    sparklog.spark.register(spark)
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    w = df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
    w.option("topic", "saved").save()  # Spark's default: ErrorIfExists
    w.option("topic", "saved").mode("errorifexists").save()
    df.write.save(format="sparklog", topic="saved",
                  **{"kafka.bootstrap.servers": broker.bootstrap})  # fmt: skip
    with pytest.raises(Exception, match="Ignore"):
        w.option("topic", "saved").mode("ignore").save()
    assert broker.stop() == 0
    assert stored(broker.data_dir, "saved")[0].num_rows == 6


@pytest.mark.spark
@pytest.mark.skipif(not ADMISSION_CONTROL, reason="maxOffsetsPerTrigger: Spark 4.2 on")
def test_stream_write_commits_each_batch_once(spark: Any, broker: Any, tmp_path: Path) -> None:
    sparklog.spark.register(spark)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(90):
        p.produce("src", key=b"k%d" % (i % 9), value=b"s%d" % i)
    assert p.flush(20) == 0

    def run() -> None:
        q = (
            spark.readStream.format("sparklog").option("subscribe", "src")
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40")
            .load(broker.data_dir).selectExpr("key", "value")
            .writeStream.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", "dst").option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True).start()
        )  # fmt: skip
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    for i in range(90, 100):
        p.produce("src", key=b"k%d" % (i % 9), value=b"s%d" % i)
    assert p.flush(20) == 0
    run()  # a restart reads and writes only the new records
    values = [v for t in stored(broker.data_dir, "dst").values()
              for v in t.column("value").to_pylist()]  # fmt: skip
    assert sorted(values) == sorted(b"s%d" % i for i in range(100))
    states = list((tmp_path / "ck" / "sparklog-sink").iterdir())
    assert states  # one directory per task


def _run_sink_job(
    broker: Any, checkpoint: Path, crash_at: str | None, transactional_id: str | None = None
) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SPARKLOG_CRASH_AT", None)
    if crash_at:
        env["SPARKLOG_CRASH_AT"] = crash_at
    proc = subprocess.run(
        [sys.executable, str(SINK_JOB), broker.data_dir, broker.bootstrap, str(checkpoint),
         *([transactional_id] if transactional_id else [])],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_killed_and_restarted_query_writes_every_record_exactly_once(
    broker: Any, tmp_path: Path, point: str
) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    from sparklog.kafka import admin as kc
    from sparklog.kafka.client import KafkaClient

    with KafkaClient(broker.bootstrap) as c:
        kc.create_topic(c, "in", 3, {})
        kc.create_topic(c, "out", 2, {})
    expected = [b"r%04d" % i for i in range(400)]
    for i, v in enumerate(expected):
        p.produce("in", key=b"k%d" % (i % 13), value=v, headers=[("i", b"%d" % i)])
    assert p.flush(20) == 0
    checkpoint = tmp_path / "ck"
    assert _run_sink_job(broker, checkpoint, point) == 1  # a write task died: query failed
    partial = [v for t in stored(broker.data_dir, "out").values()
               for v in t.column("value").to_pylist()]  # fmt: skip
    assert partial  # something was written before the crash
    assert _run_sink_job(broker, checkpoint, None) == 0
    out = stored(broker.data_dir, "out")
    values = [v for t in out.values() for v in t.column("value").to_pylist()]
    assert Counter(values) == Counter(expected)  # every record exactly once
    for t in out.values():  # the headers travelled with their records
        for v, hs in zip(t.column("value").to_pylist(), t.column("headers").to_pylist(),
                         strict=True):  # fmt: skip
            assert hs == [{"key": "i", "value": b"%d" % int(v[1:])}]


def _committed_values(data_dir: str, topic: str) -> list[bytes]:
    """What a read_committed reader sees of ``topic``."""
    storage = Storage(data_dir)
    out: list[bytes] = []
    for p in range(storage.topics.get(topic).partitions):
        view = storage.reader(topic, p).view(committed=True)
        for b in view.batches(view.log_start_offset):
            out += view.visible(b).column("value").to_pylist()
    return out


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("point", TXN_CRASH_POINTS)
def test_a_transactional_sink_is_exactly_once_for_read_committed_readers(
    broker: Any, tmp_path: Path, point: str
) -> None:
    from sparklog.kafka import admin as kc
    from sparklog.kafka.client import KafkaClient

    with KafkaClient(broker.bootstrap) as c:
        kc.create_topic(c, "in", 3, {})
        kc.create_topic(c, "out", 2, {})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    expected = [b"r%04d" % i for i in range(400)]
    for i, v in enumerate(expected):
        p.produce("in", key=b"k%d" % (i % 13), value=v, headers=[("i", b"%d" % i)])
    assert p.flush(20) == 0
    checkpoint = tmp_path / "ck"
    assert _run_sink_job(broker, checkpoint, point, "tx-sink") == 1  # a task died
    assert _run_sink_job(broker, checkpoint, None, "tx-sink") == 0
    assert Counter(_committed_values(broker.data_dir, "out")) == Counter(expected)
    assert not (checkpoint / "sparklog-sink").exists()  # the progress is in the broker


def test_an_empty_transactional_id_is_refused() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from sparklog.datasource.options.writes import write_options

    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(OptionError, match="transactional"):
        write_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t",
                       "kafka.transactional.id": " "}, schema)  # fmt: skip
