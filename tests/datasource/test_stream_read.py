"""spark.readStream.format("sparklog"): admission control, checkpoints, group commits."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog.spark
from sparklog.datasource import ADMISSION_CONTROL
from sparklog.datasource.options.reads import stream_options
from sparklog.errors import OptionError
from sparklog.jars import has_jvm_class
from sparklog.storage import Storage
from sparklog.storage.records import make_records

from ..broker.conftest import BrokerProcess

pytestmark = pytest.mark.spark
#: admission control, the source's reported latest offset (and so the group commits as each
#: batch ends): Spark 4.2 on (sparklog.datasource.ADMISSION_CONTROL)
needs_admission_control = pytest.mark.skipif(
    not ADMISSION_CONTROL, reason="Spark 4.2's admission control for Python sources"
)


def _write(root: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    storage = Storage(root)
    if not storage.topics.exists(topic):
        storage.topics.create(topic, partitions)
    log = storage.open_log(topic, 0)
    log.append(make_records(values))
    log.close()


def _run(spark: Any, root: str, checkpoint: str, **options: str) -> list[list[int]]:
    """Run an AvailableNow query; the offsets of each micro-batch, in order."""
    sparklog.spark.register(spark)
    batches: list[list[int]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append(sorted(r.offset for r in df.select("offset").collect()))

    reader = spark.readStream.format("sparklog")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load(root)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    return [b for b in batches if b]


def _run_values(spark: Any, root: str, checkpoint: str, **options: str) -> list[list[bytes]]:
    """Run an AvailableNow query; the values of each non-empty micro-batch, in order."""
    sparklog.spark.register(spark)
    batches: list[list[bytes]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append([bytes(r.value) for r in df.select("value").collect()])

    reader = spark.readStream.format("sparklog")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load(root)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    return [b for b in batches if b]


@needs_admission_control
def test_max_offsets_per_trigger_gives_exact_micro_batches(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    _write(root, "s", [b"v%d" % i for i in range(30)])
    got = _run(spark, root, str(tmp_path / "ck"), subscribe="s", startingOffsets="earliest",
               maxOffsetsPerTrigger="10")  # fmt: skip
    assert got == [list(range(0, 10)), list(range(10, 20)), list(range(20, 30))]


def test_restart_from_checkpoint_reads_only_new_records(spark: Any, tmp_path: Path) -> None:
    root, ck = str(tmp_path / "data"), str(tmp_path / "ck")
    _write(root, "s", [b"v%d" % i for i in range(12)])
    first = _run(spark, root, ck, subscribe="s", startingOffsets="earliest")
    _write(root, "s", [b"w%d" % i for i in range(5)])
    second = _run(spark, root, ck, subscribe="s", startingOffsets="earliest")
    assert [o for b in first for o in b] == list(range(12))
    assert [o for b in second for o in b] == list(range(12, 17))


def test_a_stream_can_start_at_a_timestamp(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    storage = Storage(root)
    storage.topics.create("s", 1)
    log = storage.open_log("s", 0)
    times = [1_700_000_000_000 + 10 * i for i in range(10)]
    log.append(make_records([b"v%d" % i for i in range(10)], timestamps=times))
    log.close()
    got = _run(spark, root, str(tmp_path / "ck"), subscribe="s",
               startingTimestamp="1700000000065")  # fmt: skip
    assert [o for b in got for o in b] == [7, 8, 9]


def test_a_new_stream_starts_at_the_latest_offsets(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    _write(root, "s", [b"v%d" % i for i in range(5)])
    assert _run(spark, root, str(tmp_path / "ck"), subscribe="s") == []


def test_available_now_stops_at_the_backlog_and_picks_up_new_partitions(
    spark: Any, tmp_path: Path
) -> None:
    root, ck = str(tmp_path / "data"), str(tmp_path / "ck")
    _write(root, "s", [b"v%d" % i for i in range(4)])
    _run(spark, root, ck, subscribe="s", startingOffsets="earliest")
    storage = Storage(root)
    storage.topics.add_partitions("s", 2)
    log = storage.open_log("s", 1)
    log.append(make_records([b"p1-0", b"p1-1"]))
    log.close()
    got = _run(spark, root, ck, subscribe="s", startingOffsets="earliest")
    assert [o for b in got for o in b] == [0, 1]


@needs_admission_control
def test_group_offsets_are_committed_through_the_broker(spark: Any, tmp_path: Path) -> None:
    broker = BrokerProcess(str(tmp_path / "broker"), metrics=True).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(25):
            p.produce("g", value=b"v%d" % i)
        assert p.flush(20) == 0
        got = _run(spark, broker.data_dir, str(tmp_path / "ck"), subscribe="g",
                   startingOffsets="earliest", group="spark-q",
                   **{"kafka.bootstrap.servers": broker.bootstrap})  # fmt: skip
        assert sum(len(b) for b in got) == 25
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "spark-q"})
        [tp] = c.committed([TopicPartition("g", 0)], timeout=10)
        c.close()
        assert tp.offset == 25
        # the query is a consumer group in /metrics too: no live member, its lag kept
        from tests.support.metrics import scrape, value

        m = scrape(broker)
        labels = {"consumergroup": "spark-q", "topic": "g", "partition": 0}
        assert value(m, "kafka_consumergroup_current_offset", **labels) == 25
        assert value(m, "kafka_consumergroup_lag", **labels) == 0
        assert value(m, "kafka_consumergroup_members", consumergroup="spark-q") == 0
    finally:
        broker.stop()


@needs_admission_control
def test_group_lag_is_current_when_a_batch_ends_and_after_stop(spark: Any, tmp_path: Path) -> None:
    from sparklog.kafka import admin as kc
    from sparklog.kafka.client import KafkaClient

    broker = BrokerProcess(str(tmp_path / "broker")).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(700):
            p.produce("lag", value=b"v%d" % i)
        assert p.flush(20) == 0
        sparklog.spark.register(spark)
        q = (
            spark.readStream.format("sparklog")
            .option("subscribe", "lag")
            .option("startingOffsets", "earliest")
            .option("group", "current")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .load(broker.data_dir)
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(processingTime="1 hour")  # one batch now, the next one much later
            .start()
        )
        try:
            deadline = time.monotonic() + 60
            while not (q.lastProgress and q.lastProgress["numInputRows"] == 700):
                assert time.monotonic() < deadline and q.isActive, q.exception()
                time.sleep(0.1)
            committed: dict[tuple[str, int], int] = {}
            while committed != {("lag", 0): 700} and time.monotonic() < deadline:
                with KafkaClient(broker.bootstrap) as c:
                    committed = kc.committed_offsets(c, "current")
                time.sleep(0.1)
            assert committed == {("lag", 0): 700}  # before the next batch is planned
        finally:
            q.stop()
        with KafkaClient(broker.bootstrap) as c:
            assert kc.committed_offsets(c, "current") == {("lag", 0): 700}
    finally:
        broker.stop()


@needs_admission_control
def test_micro_batches_over_a_topic_kafka_clients_produce_to(spark: Any, tmp_path: Path) -> None:
    broker = BrokerProcess(str(tmp_path / "broker")).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                      "partitioner": "murmur2_random"})  # fmt: skip
        from sparklog.kafka import admin as kc
        from sparklog.kafka.client import KafkaClient

        with KafkaClient(broker.bootstrap) as c:
            kc.create_topic(c, "live", 3, {})
        for i in range(30):
            p.produce("live", key=b"k%d" % i, value=b"v%d" % i)
        assert p.flush(20) == 0
        ck = str(tmp_path / "ck")
        opts = {"subscribe": "live", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10",
                "group": "lagging", "kafka.bootstrap.servers": broker.bootstrap}  # fmt: skip
        first = _run_values(spark, broker.data_dir, ck, **opts)
        assert [len(b) for b in first] == [10, 10, 10]  # exactly the limit per micro-batch
        for i in range(30, 45):
            p.produce("live", key=b"k%d" % i, value=b"v%d" % i)
        assert p.flush(20) == 0
        second = _run_values(spark, broker.data_dir, ck, **opts)  # restart from checkpoint
        got = [v for b in first + second for v in b]
        assert sorted(got) == sorted(b"v%d" % i for i in range(45))  # no loss, no duplicate
        # what `sparklog groups describe` shows, once the listener heard of the last batch
        # (Spark delivers progress events to listeners asynchronously)
        deadline = time.monotonic() + 30
        while True:
            with KafkaClient(broker.bootstrap) as c:
                rows = kc.describe_group(c, "lagging", int(time.time() * 1000))["partitions"]
            if sum(r["committed_offset"] for r in rows) == 45 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sum(r["committed_offset"] for r in rows) == 45
        assert all(r["lag"] == 0 and r["lag_seconds"] == 0 for r in rows)
    finally:
        broker.stop()


def test_data_loss_in_a_stream_fails_or_continues_from_the_log_start(
    spark: Any, tmp_path: Path
) -> None:
    root, ck = str(tmp_path / "data"), str(tmp_path / "ck")
    _write(root, "s", [b"v%d" % i for i in range(6)])
    assert _run(spark, root, ck, subscribe="s", startingOffsets="earliest") == [list(range(6))]
    _write(root, "s", [b"w%d" % i for i in range(6)])
    log = Storage(root).open_log("s", 0)
    log.delete_records(9)  # retention removed offsets 6..8 before the query read them
    log.close()
    sparklog.spark.register(spark)
    with pytest.raises(Exception, match=r"s-0: offsets 6\.\.8"):
        _run(spark, root, ck, subscribe="s", startingOffsets="earliest")
    got = _run(spark, root, ck, subscribe="s", startingOffsets="earliest", failOnDataLoss="false")
    assert got == [[9, 10, 11]]


def test_a_query_goes_on_through_a_deleted_and_recreated_topic(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    _write(root, "gone", [b"v0", b"v1", b"v2"])
    sparklog.spark.register(spark)
    got: list[bytes] = []
    q = (
        spark.readStream.format("sparklog")
        .option("subscribe", "gone")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .load(root)
        .writeStream.foreachBatch(
            lambda df, _id: got.extend(r.value for r in df.orderBy("offset").collect())
        )
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 60
        while len(got) < n and q.isActive and time.monotonic() < deadline:
            time.sleep(0.1)

    try:
        wait_for(3)
        Storage(root).topics.delete("gone")
        time.sleep(2)  # triggers on a deleted topic: skipped with a warning
        assert q.isActive, q.exception()
        _write(root, "gone", [b"w0", b"w1"])  # created again: read from its start
        wait_for(5)
        assert q.isActive, q.exception()
        assert got == [b"v0", b"v1", b"v2", b"w0", b"w1"]
        latest = json.loads(q.lastProgress["sources"][0]["latestOffset"])
        assert latest["sparklog:source"]["dataLossEvents"] >= 1
    finally:
        q.stop()


def test_starting_offsets_group_resumes_from_committed(spark: Any, tmp_path: Path) -> None:
    broker = BrokerProcess(str(tmp_path / "broker")).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(10):
            p.produce("h", value=b"v%d" % i)
        assert p.flush(20) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "resume",
                      "enable.auto.commit": False})  # fmt: skip
        c.commit(offsets=[TopicPartition("h", 0, 7)], asynchronous=False)
        c.close()
        got = _run(spark, broker.data_dir, str(tmp_path / "ck"), subscribe="h",
                   startingOffsets="group", group="resume",
                   **{"kafka.bootstrap.servers": broker.bootstrap})  # fmt: skip
        assert [o for b in got for o in b] == [7, 8, 9]
    finally:
        broker.stop()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "s", "endingOffsets": "latest"}, "endingOffsets"),
        ({"subscribe": "s", "endingTimestamp": "5"}, "endingTimestamp"),
        ({"subscribe": "s", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "s", "startingOffsets": "group"}, "group"),
        ({"subscribe": "s", "group": "g"}, "kafka.bootstrap.servers"),
    ],
)
def test_bad_stream_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        stream_options({"path": "/x", **options})


def test_offsets_json_matches_kafka_sources_shape(tmp_path: Path) -> None:
    from sparklog.datasource.stream import SparkLogStreamReader

    root = str(tmp_path / "data")
    _write(root, "s", [b"a", b"b"])
    reader = SparkLogStreamReader(stream_options({"path": root, "subscribe": "s",
                                                  "startingOffsets": "earliest"}))  # fmt: skip
    start = reader.initialOffset()
    assert json.loads(json.dumps(start)) == {"s": {"0": 0}}
    assert reader.reportLatestOffset() == {"s": {"0": 2}}


def test_spark_4_1_asks_for_the_latest_offset_without_a_start(tmp_path: Path) -> None:
    """Spark 4.1 calls ``latestOffset()`` with no start and no limit (admission control
    for Python sources came with 4.2): everything there, as one micro-batch."""
    from sparklog.datasource.stream import SparkLogStreamReader

    root = str(tmp_path / "data")
    _write(root, "s", [b"a", b"b", b"c"])
    reader = SparkLogStreamReader(stream_options({"path": root, "subscribe": "s",
                                                  "startingOffsets": "earliest"}))  # fmt: skip
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert end == {"s": {"0": 3}}
    assert [(r.start, r.end) for r in reader.partitions(start, end)] == [(0, 3)]


def test_without_admission_control_trigger_limits_are_refused() -> None:
    from sparklog.datasource.driver import check_stream_features

    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger"):
        o = stream_options({"path": "/x", "subscribe": "s", name: "10"})
        check_stream_features(o, admission_control=True)
        with pytest.raises(OptionError, match=f"option {name} needs Spark 4.2 or newer"):
            check_stream_features(o, admission_control=False)
    check_stream_features(stream_options({"path": "/x", "subscribe": "s"}), False)


@needs_admission_control
def test_reported_latest_offset_is_the_backlog_the_last_latest_offset_call_saw(
    tmp_path: Path,
) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sparklog.datasource.stream import SparkLogStreamReader

    root = str(tmp_path / "data")
    _write(root, "s", [b"a", b"b", b"c"])
    reader = SparkLogStreamReader(stream_options({"path": root, "subscribe": "s",
                                                  "startingOffsets": "earliest"}))  # fmt: skip
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMaxRows(1)) == {"s": {"0": 1}}  # admitted
    _write(root, "s", [b"d"])
    assert reader.reportLatestOffset() == {"s": {"0": 3}}  # available when it was planned
    reader.latestOffset(start, ReadMaxRows(1))
    assert reader.reportLatestOffset() == {"s": {"0": 4}}


@needs_admission_control
def test_min_offsets_per_trigger_waits_for_records_or_the_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from sparklog.datasource import stream
    from sparklog.datasource.stream import SparkLogStreamReader

    clock = [1000.0]  # the reader's monotonic clock, so a slow machine cannot pass the delay
    monkeypatch.setattr(stream, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    root = str(tmp_path / "data")
    _write(root, "s", [b"a", b"b", b"c"])
    reader = SparkLogStreamReader(
        stream_options(
            {
                "path": root,
                "subscribe": "s",
                "startingOffsets": "earliest",
                "minOffsetsPerTrigger": "5",
                "maxTriggerDelay": "1s",
            }
        )
    )
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMaxRows(100)) == start  # 3 < 5: wait
    assert reader.latestOffset(start, ReadAllAvailable()) == {"s": {"0": 3}}  # AvailableNow
    clock[0] += 0.9
    assert reader.latestOffset(start, ReadMaxRows(100)) == start  # still within the delay
    clock[0] += 0.2
    assert reader.latestOffset(start, ReadMaxRows(100)) == {"s": {"0": 3}}  # delay passed


@needs_admission_control
def test_min_offsets_per_trigger_alone_is_the_default_read_limit(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadMinRows

    from sparklog.datasource.stream import SparkLogStreamReader

    root = str(tmp_path / "data")
    _write(root, "s", [b"a", b"b", b"c"])
    reader = SparkLogStreamReader(stream_options({"path": root, "subscribe": "s",
                                                  "startingOffsets": "earliest",
                                                  "minOffsetsPerTrigger": "5",
                                                  "maxTriggerDelay": "1h"}))  # fmt: skip
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(5)
    start = reader.initialOffset()
    assert reader.latestOffset(start, limit) == start  # 3 < 5: wait
    _write(root, "s", [b"d", b"e"])
    assert reader.latestOffset(start, limit) == {"s": {"0": 5}}


@needs_admission_control
def test_a_query_with_only_min_offsets_per_trigger_waits_for_them(
    spark: Any, tmp_path: Path
) -> None:
    root = str(tmp_path / "data")
    _write(root, "s", [b"a", b"b", b"c"])
    sparklog.spark.register(spark)
    sizes: list[int] = []
    q = (
        spark.readStream.format("sparklog")
        .option("subscribe", "s")
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "5")
        .option("maxTriggerDelay", "1h")
        .load(root)
        .writeStream.foreachBatch(lambda df, _id: sizes.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        time.sleep(4)  # many triggers, each finding 3 < 5 records
        assert not [n for n in sizes if n], sizes
        _write(root, "s", [b"d", b"e"])
        deadline = time.monotonic() + 60
        while not [n for n in sizes if n] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [n for n in sizes if n] == [5]
    finally:
        q.stop()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "exceeds"),
        ({"maxTriggerDelay": "5s"}, "needs minOffsetsPerTrigger"),
        ({"minOffsetsPerTrigger": "1", "maxTriggerDelay": "soon"}, "duration"),
    ],
)
def test_bad_trigger_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        stream_options({"path": "/x", "subscribe": "s", **options})


def test_the_local_checkpoint_file_manager_is_the_one_spark_defaults_conf_names(
    spark: Any,
) -> None:
    conf = (Path(__file__).parents[2] / "conf" / "spark-defaults.conf").read_text()
    settings = dict(
        line.split(None, 1) for line in conf.splitlines() if line.strip() and line[0] != "#"
    )
    name = sparklog.spark.LOCAL_CHECKPOINT_FILE_MANAGER
    assert settings[sparklog.spark.CHECKPOINT_FILE_MANAGER_CONF].strip() == name
    assert has_jvm_class(spark, name)  # still where this pyspark keeps it
    assert spark.conf.get(sparklog.spark.CHECKPOINT_FILE_MANAGER_CONF) == name
