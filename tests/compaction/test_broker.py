"""A running broker process and jobs that commit without calling it: the broker picks up
the new segment set by watching manifests; Kafka consumers before the new log start get
OFFSET_OUT_OF_RANGE and follow auto.offset.reset; dropped files are deleted after
file.delete.delay.ms; keyless records are refused on compacted topics."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sparklog.compaction.compactor import compact
from sparklog.compaction.retention import apply_retention
from sparklog.storage import Storage, names
from sparklog_testkit.processes import BrokerProcess

from .helpers import manifest

HOUR = 3600 * 1000
TIMEOUT = 20.0


def wait_until(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_for_log_start(broker: BrokerProcess, topic: str, offset: int) -> None:
    """Until the broker serves ``offset`` as the earliest offset (it refreshes manifests
    on its own schedule)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    try:
        wait_until(
            lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[0] == offset,
            f"ListOffsets earliest to return {offset}",
        )
    finally:
        c.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def start_broker(tmp_path: Path, data_dir: str) -> Iterator[Callable[[], BrokerProcess]]:
    """Starts the broker (after the test created its topics in storage), fast maintenance."""
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker]\nmanifest_refresh_ms = 100\ngc_interval_ms = 200\n")
    started: list[BrokerProcess] = []

    def start() -> BrokerProcess:
        b = BrokerProcess(data_dir, extra=("--config", str(conf))).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()
        b.kill()


def produce(
    bootstrap: str, topic: str, batches: list[list[tuple[bytes | None, bytes | None]]], ts: int = 0
) -> list[Any]:
    """Produce each batch to partition 0 and flush (one produce request each); returns the
    delivery errors (None for each record that was written)."""
    # linger: each batch's records go in one produce request, so one append
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": False})
    results: list[Any] = []
    for batch in batches:
        for k, v in batch:
            p.produce(
                topic, v, k, partition=0, timestamp=ts, on_delivery=lambda e, _m: results.append(e)
            )
        p.flush(TIMEOUT)
    return results


def consume(bootstrap: str, topic: str, start: int, reset: str, n: int) -> list[Any]:
    """Up to ``n`` messages (or errors) from ``start`` with ``auto.offset.reset=reset``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{reset}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
        }
    )
    c.assign([TopicPartition(topic, 0, start)])
    out: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            out.append(msg.error() or msg)
            if msg.error() is not None:
                break
    finally:
        c.close()
    return out


def _partition_dir(data_dir: str, topic: str) -> str:
    storage = Storage(data_dir)
    return names.partition_dir(storage.root, topic, 0)


def _sealed(data_dir: str, topic: str) -> list[str]:
    return [s.name for s in manifest(Storage(data_dir), 0, topic).segments if s.sealed]


def _with_old_segments(data_dir: str, topic: str, start_broker: Callable[[], BrokerProcess],
                       **configs: str) -> BrokerProcess:  # fmt: skip
    """A broker serving ``topic`` with 3 sealed segments of 5 records, 2 hours old, then 5
    new records in the active segment."""
    Storage(data_dir).topics.create(
        topic, 1, {"segment.bytes": "400", "retention.ms": str(HOUR), **configs}
    )
    broker = start_broker()
    old = int(time.time() * 1000) - 2 * HOUR
    batches = [[(b"k%d" % i, b"v%d-%d" % (b, i)) for i in range(5)] for b in range(3)]
    assert produce(broker.bootstrap, topic, batches, ts=old) == [None] * 15
    assert (
        produce(broker.bootstrap, topic, [[(b"new", b"x%d" % i) for i in range(5)]]) == [None] * 5
    )
    wait_until(lambda: len(_sealed(data_dir, topic)) == 3, "three sealed segments")
    return broker


def test_broker_serves_the_log_start_a_retention_job_committed(
    data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    broker = _with_old_segments(data_dir, "events", start_broker)
    (outcome,) = apply_retention(data_dir, ["events"]).outcomes
    assert outcome.log_start_after == 15
    wait_for_log_start(broker, "events", 15)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"})
    try:
        assert c.get_watermark_offsets(TopicPartition("events", 0), timeout=5) == (15, 20)
    finally:
        c.close()
    assert broker.wait_for_line(lambda line: "manifest version" in line and "retention:" in line)


def test_consumer_before_the_new_log_start_resets_to_earliest(
    data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    broker = _with_old_segments(data_dir, "events", start_broker)
    apply_retention(data_dir, ["events"])
    wait_for_log_start(broker, "events", 15)
    msgs = consume(broker.bootstrap, "events", 3, "earliest", 5)
    assert [m.offset() for m in msgs] == [15, 16, 17, 18, 19]
    assert [m.value() for m in msgs] == [b"x%d" % i for i in range(5)]


def test_consumer_before_the_new_log_start_with_reset_error_gets_offset_out_of_range(
    data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    broker = _with_old_segments(data_dir, "events", start_broker)
    apply_retention(data_dir, ["events"])
    wait_for_log_start(broker, "events", 15)
    (err,) = consume(broker.bootstrap, "events", 3, "error", 1)
    assert isinstance(err, KafkaError)
    assert err.code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in err.str().lower()


def test_consumer_before_the_new_log_start_with_reset_latest_waits_at_the_end(
    data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    broker = _with_old_segments(data_dir, "events", start_broker)
    apply_retention(data_dir, ["events"])
    wait_for_log_start(broker, "events", 15)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "latest",
                  "enable.auto.commit": False, "auto.offset.reset": "latest"})  # fmt: skip
    c.assign([TopicPartition("events", 0, 3)])
    try:
        assert c.poll(1.5) is None  # reset to the end: nothing to read
        assert produce(broker.bootstrap, "events", [[(b"after", b"a")]]) == [None]
        msg = None
        deadline = time.monotonic() + TIMEOUT
        while msg is None and time.monotonic() < deadline:
            msg = c.poll(0.2)
        assert msg is not None and msg.error() is None
        assert (msg.offset(), msg.value()) == (20, b"a")
    finally:
        c.close()


def test_broker_deletes_dropped_files_after_file_delete_delay(
    data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    _with_old_segments(data_dir, "events", start_broker, **{"file.delete.delay.ms": "3000"})
    dropped = _sealed(data_dir, "events")
    path = _partition_dir(data_dir, "events")
    apply_retention(data_dir, ["events"])
    committed_s = manifest(Storage(data_dir), topic="events").committed_ms / 1000
    assert set(dropped) <= set(os.listdir(path))  # readers of the old version still have them
    wait_until(lambda: not set(dropped) & set(os.listdir(path)), "the dropped segments to go")
    assert time.time() - committed_s >= 2.9  # not before file.delete.delay.ms (ms clocks)
    assert not {names.offset_index_name(n) for n in dropped} & set(os.listdir(path))


def test_keyless_record_to_a_compacted_topic_is_refused(
    data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    Storage(data_dir).topics.create("changelog", 1, {"cleanup.policy": "compact"})
    broker = start_broker()
    (err,) = produce(broker.bootstrap, "changelog", [[(None, b"no key")]])
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    assert produce(broker.bootstrap, "changelog", [[(b"k", b"keyed")]]) == [None]
    (delete_err,) = produce(broker.bootstrap, "changelog", [[(None, None)]])
    assert delete_err is not None and delete_err.code() == KafkaError.INVALID_RECORD
    msgs = consume(broker.bootstrap, "changelog", 0, "earliest", 1)
    assert [(m.offset(), m.key(), m.value()) for m in msgs] == [(0, b"k", b"keyed")]


@pytest.mark.spark
def test_consumer_reads_the_compacted_log_while_the_broker_keeps_appending(
    spark: Any, data_dir: str, start_broker: Callable[[], BrokerProcess]
) -> None:
    Storage(data_dir).topics.create(
        "changelog", 1, {"cleanup.policy": "compact", "segment.bytes": "400"}
    )
    broker = start_broker()
    batches = [[(b"k%d" % (i % 4), b"v%d-%d" % (b, i)) for i in range(6)] for b in range(4)]
    assert produce(broker.bootstrap, "changelog", batches) == [None] * 24
    wait_until(lambda: len(_sealed(data_dir, "changelog")) == 3, "three sealed segments")
    (outcome,) = compact(spark, data_dir, ["changelog"]).outcomes
    assert outcome.status == "compacted" and outcome.end_offset == 18
    assert produce(broker.bootstrap, "changelog", [[(b"k0", b"after")]]) == [None]
    time.sleep(0.5)
    msgs = consume(broker.bootstrap, "changelog", 0, "earliest", 10)
    got = [(m.offset(), m.key(), m.value()) for m in msgs]
    # the last of each key in [0, 18), then everything after it, offsets unchanged
    assert got == [
        (14, b"k2", b"v2-2"), (15, b"k3", b"v2-3"), (16, b"k0", b"v2-4"), (17, b"k1", b"v2-5"),
        *[(18 + i, b"k%d" % (i % 4), b"v3-%d" % i) for i in range(6)],
    ]  # fmt: skip
    assert consume(broker.bootstrap, "changelog", 18, "earliest", 7)[-1].value() == b"after"
