"""``/metrics`` of a real broker (``--metrics``), checked against known produce, commit and
consume sequences made with real Kafka clients (confluent-kafka, sparklog's own admin
client): kafka_exporter's names and values, lag with and without live members, lag in
seconds, lag status, counters, storage and job gauges, a restart, and scrapes while
produce runs at full speed.

The broker samples lag every 100 ms with a window of 3 (``lag_sample_ms``,
``lag_window``), so that a status can change within a test.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerProcess
from tests.support.metrics import commit, create, produce, scrape, value


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("metrics")
    config = base / "broker.toml"
    config.write_text("[broker]\nlag_sample_ms = 100\nlag_window = 3\n")
    b = BrokerProcess(str(base / "data"), metrics=True, extra=("--config", str(config)))
    b.start()
    yield b
    b.stop()


def test_topic_partitions_and_offsets_have_kafka_exporters_names(broker: BrokerProcess) -> None:
    topic = create(broker, "m-topics", 2)
    produce(broker, topic, {0: 7, 1: 3})
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: it resolves the futures
    for f in client.delete_records([TopicPartition(topic, 0, 2)]).values():
        f.result(30)
    m = scrape(broker)
    assert value(m, "kafka_brokers") == 1
    assert value(m, "kafka_broker_info", address=broker.bootstrap, id=0) == 1
    assert value(m, "kafka_topic_partitions", topic=topic) == 2
    for p, end, start in ((0, 7, 2), (1, 3, 0)):
        assert value(m, "kafka_topic_partition_current_offset", topic=topic, partition=p) == end
        assert value(m, "kafka_topic_partition_oldest_offset", topic=topic, partition=p) == start
        assert value(m, "kafka_topic_partition_leader", topic=topic, partition=p) == 0
        assert value(m, "kafka_topic_partition_replicas", topic=topic, partition=p) == 1
        assert value(m, "kafka_topic_partition_in_sync_replica", topic=topic, partition=p) == 1


def test_group_lag_is_reported_with_and_without_live_members(broker: BrokerProcess) -> None:
    topic = create(broker, "m-lag", 3)
    produce(broker, topic, {0: 10, 1: 4, 2: 5})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while True:  # a member of the group's current generation commits
        c.poll(0.2)
        if len(c.assignment()) == 3:
            try:
                c.commit(offsets=[TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 4)],
                         asynchronous=False)  # fmt: skip
                break
            except KafkaException:  # a rebalance still settling: ILLEGAL_GENERATION
                pass
        assert time.monotonic() < deadline
    m = scrape(broker)
    g = {"consumergroup": "live", "topic": topic}
    assert value(m, "kafka_consumergroup_members", consumergroup="live") == 1
    assert value(m, "kafka_consumergroup_current_offset", **g, partition=0) == 6
    assert value(m, "kafka_consumergroup_lag", **g, partition=0) == 4
    assert value(m, "kafka_consumergroup_lag", **g, partition=1) == 0
    assert value(m, "kafka_consumergroup_lag", **g, partition=2) is None  # no commit: no -1
    assert value(m, "kafka_consumergroup_lag_sum", **g) == 4
    assert value(m, "kafka_consumergroup_current_offset_sum", **g) == 10
    c.close()
    m = scrape(broker)  # no live member: the group keeps its lag series
    assert value(m, "kafka_consumergroup_members", consumergroup="live") == 0
    assert value(m, "kafka_consumergroup_lag", **g, partition=0) == 4


def test_lag_is_never_negative(broker: BrokerProcess) -> None:
    topic = create(broker, "m-ahead")
    produce(broker, topic, {0: 3})
    commit(broker, "ahead", {(topic, 0): 50})  # committed past the log end
    m = scrape(broker)
    labels = {"consumergroup": "ahead", "topic": topic, "partition": 0}
    assert value(m, "kafka_consumergroup_current_offset", **labels) == 50
    assert value(m, "kafka_consumergroup_lag", **labels) == 0


def test_lag_in_seconds_is_the_age_of_the_oldest_unconsumed_record(
    broker: BrokerProcess,
) -> None:
    topic = create(broker, "m-seconds")
    hour_ago = int(time.time() * 1000) - 3_600_000
    produce(broker, topic, {0: 2}, timestamp=hour_ago)
    produce(broker, topic, {0: 2})
    commit(broker, "slow", {(topic, 0): 1})
    commit(broker, "fast", {(topic, 0): 4})
    m = scrape(broker)
    slow = value(m, "sparklog_consumergroup_lag_seconds", consumergroup="slow", topic=topic,
                 partition=0)  # fmt: skip
    assert slow is not None and 3590 < slow < 3700
    fast = value(m, "sparklog_consumergroup_lag_seconds", consumergroup="fast", topic=topic,
                 partition=0)  # fmt: skip
    assert fast == 0


def test_requests_and_records_are_counted(broker: BrokerProcess) -> None:
    topic = create(broker, "m-counted")
    before = scrape(broker)
    produce(broker, topic, {0: 25})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "counter",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 25 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        got += msg is not None and msg.error() is None
    c.close()
    m = scrape(broker)
    assert value(m, "sparklog_produce_records_total", topic=topic) == 25
    assert value(m, "sparklog_fetch_records_total", topic=topic) >= 25  # type: ignore[operator]
    assert value(m, "sparklog_produce_bytes_total", topic=topic) > 25  # type: ignore[operator]
    produced = value(m, "sparklog_request_duration_seconds_count", api="Produce")
    assert produced is not None and produced > (
        value(before, "sparklog_request_duration_seconds_count", api="Produce") or 0
    )
    assert value(m, "sparklog_request_bytes_total", api="Produce") > 0  # type: ignore[operator]
    assert value(m, "sparklog_fsync_duration_seconds_count") > 0  # type: ignore[operator]


def test_storage_gauges_follow_the_log(broker: BrokerProcess) -> None:
    topic = create(broker, "m-segments", **{"segment.bytes": "2000"})
    produce(broker, topic, {0: 60}, one_by_one=True)  # a batch each: segments roll
    m = scrape(broker)
    assert value(m, "sparklog_partition_segments", topic=topic, partition=0) > 1  # type: ignore[operator]
    assert value(m, "sparklog_partition_bytes", topic=topic, partition=0) > 2000  # type: ignore[operator]
    assert value(m, "sparklog_partition_active_segment_bytes", topic=topic, partition=0) > 0  # type: ignore[operator]
    assert value(m, "sparklog_partition_unsealed_segments", topic=topic, partition=0) is not None


def test_the_last_retention_run_of_a_topic_is_reported(broker: BrokerProcess) -> None:
    from sparklog.compaction.retention import apply_retention

    topic = create(broker, "m-retained", **{"segment.bytes": "2000", "retention.bytes": "3000"})
    produce(broker, topic, {0: 60}, one_by_one=True)  # rolls segments of about 2000 bytes
    time.sleep(1)  # sealing runs in the background: retention deletes sealed segments only
    apply_retention(broker.data_dir, [topic])
    m = scrape(broker)
    labels = {"topic": topic, "sparklog_job": "retention"}
    ended = value(m, "sparklog_job_last_run_timestamp_seconds", **labels)
    assert ended is not None and abs(ended - time.time()) < 120
    removed = value(m, "sparklog_job_last_run_removed", **labels, unit="segments")
    assert removed is not None and removed > 0
    assert value(m, "sparklog_job_last_run_removed", **labels, unit="records") > 0  # type: ignore[operator]


def test_a_rewound_group_is_reported_and_described(broker: BrokerProcess) -> None:
    topic = create(broker, "m-rewind")
    produce(broker, topic, {0: 100})
    commit(broker, "rewinder", {(topic, 0): 60})
    time.sleep(0.3)
    scrape(broker)  # a sample at 60
    time.sleep(0.3)
    commit(broker, "rewinder", {(topic, 0): 20})
    time.sleep(0.3)
    m = scrape(broker)
    labels = {"consumergroup": "rewinder", "topic": topic, "partition": 0}
    assert value(m, "sparklog_consumergroup_partition_status", **labels, status="REWIND") == 1
    assert value(m, "sparklog_consumergroup_status", consumergroup="rewinder",
                 status="REWIND") == 1  # fmt: skip


def test_a_group_that_stopped_committing_with_lag_is_stop(broker: BrokerProcess) -> None:
    topic = create(broker, "m-stop")
    produce(broker, topic, {0: 10})
    commit(broker, "stopped", {(topic, 0): 5})
    time.sleep(0.6)  # longer than the window's span (3 x 100 ms)
    m = scrape(broker)
    assert value(m, "sparklog_consumergroup_status", consumergroup="stopped", status="STOP") == 1
    # and `sparklog groups describe` shows it, read from the coordinator's /metrics
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "groups", "describe", "stopped",
         "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "lag status STOP" in out
    cols = next(line for line in out.splitlines() if line.startswith(topic)).split("\t")
    assert (cols[4], cols[6]) == ("5", "STOP")  # LAG, STATUS


def test_a_deleted_topics_series_end(broker: BrokerProcess) -> None:
    topic = create(broker, "m-deleted")
    produce(broker, topic, {0: 1})
    assert value(scrape(broker), "sparklog_produce_records_total", topic=topic) == 1
    with KafkaClient(broker.bootstrap) as c:
        admin.delete_topic(c, topic)
    m = scrape(broker)
    assert value(m, "sparklog_produce_records_total", topic=topic) is None
    assert value(m, "kafka_topic_partitions", topic=topic) is None


def test_offsets_and_lag_are_the_same_after_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(str(tmp_path / "data"), metrics=True).start()
    try:
        topic = create(b, "m-restart")
        produce(b, topic, {0: 9})
        commit(b, "kept", {(topic, 0): 4})
        before = scrape(b)
        b.stop()
        b.start()  # on the same ports
        after = scrape(b)
        for name, labels in (
            ("kafka_topic_partition_current_offset", {"topic": topic, "partition": 0}),
            ("kafka_consumergroup_lag", {"consumergroup": "kept", "topic": topic, "partition": 0}),
        ):
            assert value(after, name, **labels) == value(before, name, **labels)
        assert value(after, "kafka_consumergroup_lag", consumergroup="kept", topic=topic,
                     partition=0) == 5  # fmt: skip
    finally:
        b.stop()


def test_scrapes_are_answered_while_produce_runs_at_full_speed(broker: BrokerProcess) -> None:
    topic = create(broker, "m-load", 4)
    stop = threading.Event()
    sent = [0]

    def load() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all",
                      "batch.size": 1 << 20})  # fmt: skip
        while not stop.is_set():
            for _ in range(5000):
                try:
                    p.produce(topic, value=b"x" * 100)
                except BufferError:
                    p.poll(0.05)
                sent[0] += 1
            p.poll(0)
        p.flush(60)

    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(1)
        offsets = []
        for _ in range(10):  # each scrape is answered, and sees the log move on
            m = scrape(broker)
            offsets.append(sum(value(m, "kafka_topic_partition_current_offset", topic=topic,
                                     partition=p) or 0 for p in range(4)))  # fmt: skip
            time.sleep(0.3)
    finally:
        stop.set()
        t.join(120)
        with KafkaClient(broker.bootstrap) as c:  # ~0.5 GB at full speed: not left on disk
            admin.delete_topic(c, topic)
    assert offsets == sorted(offsets) and offsets[-1] > offsets[0]
