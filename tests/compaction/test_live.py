"""Retention and compaction while the log is live.

A broker process serves two topics of two partitions with small segments: ``changelog``
(``cleanup.policy=compact``, ``min.compaction.lag.ms`` 15 s) and ``events`` (``delete``,
``retention.ms`` 20 s). Two confluent-kafka producers write keyed updates and tombstones
to both, a confluent-kafka consumer tails both from offset 0, and a Spark streaming query
(``readStream.format("sparklog")``) tails both too, while the retention and compaction jobs
run back to back, again and again, on the same storage (committing manifests without
calling the broker). Afterwards:

- no producer, consumer, query, job or broker error;
- the consumer and the query each saw every acknowledged record exactly once, with the
  value it was produced with, and offsets only increasing per partition;
- the jobs did work: records removed by compaction in every changelog partition, the log
  start offset advanced by retention in every events partition; what is left reads back
  with its produced values, and one record per key in the compacted part.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import sparklog.spark
from sparklog.compaction.compactor import compact
from sparklog.compaction.retention import apply_retention
from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerProcess

from .helpers import manifest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

CHANGELOG, EVENTS = "changelog", "events"
PARTITIONS = 2
PRODUCE_S = 36.0
KEYS = 150
COMMON = {"segment.bytes": "60000", "file.delete.delay.ms": "10000"}
CONFIGS = {
    CHANGELOG: {
        **COMMON,
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": "15000",
        "delete.retention.ms": "2000",
        "min.cleanable.dirty.ratio": "0.05",
    },
    EVENTS: {**COMMON, "cleanup.policy": "delete", "retention.ms": "20000"},
}

Where = tuple[str, int, int]  # topic, partition, offset
Seen = dict[Where, tuple[bytes, bytes | None]]
Row = tuple[str, int, int, bytes, bytes | None]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    data = str(tmp_path / "data")
    for topic, configs in CONFIGS.items():
        Storage(data).topics.create(topic, PARTITIONS, configs)
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker]\nmanifest_refresh_ms = 200\ngc_interval_ms = 1000\n")
    b = BrokerProcess(data, extra=("--config", str(conf))).start()
    yield b
    b.stop()
    b.kill()


class Producers:
    """Two producer threads: keyed updates (1 in 20 a tombstone) to both topics."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: Seen = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(2)]

    def _run(self, ident: int) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "acks": "all"})
        lock = threading.Lock()

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
                return
            with lock:
                where = (msg.topic(), msg.partition(), msg.offset())
                self.acked[where] = (msg.key(), msg.value())

        for seq in itertools.count():
            if self.stop.is_set():
                break
            key = b"k%03d" % ((seq * 7 + ident * 13) % KEYS)
            value = None if seq % 20 == 19 else b"p%d-%d" % (ident, seq)
            p.produce(CHANGELOG if seq % 2 else EVENTS, value, key, on_delivery=done)
            p.poll(0)
            if seq % 25 == 24:
                time.sleep(0.1)
        if p.flush(30) != 0:
            self.errors.append("producer did not flush")

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


class Tail:
    """A confluent-kafka consumer reading every partition from offset 0; with
    ``auto.offset.reset=error`` a read below a log start would be an error."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "tail",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
            }
        )
        self.consumer.assign([TopicPartition(t, p, 0) for t in CONFIGS for p in range(PARTITIONS)])
        self.seen: list[Row] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                self.errors.append(str(msg.error()))
                continue
            self.seen.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))
        self.consumer.close()


class Jobs:
    """Retention then compaction over every topic, back to back, until stopped."""

    def __init__(self, spark: Any, root: str) -> None:
        self.spark, self.root = spark, root
        self.rounds = 0
        self.removed = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                apply_retention(self.root)
                report = compact(self.spark, self.root)
                self.removed += sum(
                    o.records_before - o.records_after
                    for o in report.outcomes
                    if o.status == "compacted"
                )
                self.errors += [o.line() for o in report.conflicts]
                self.rounds += 1
            except Exception as e:
                self.errors.append(repr(e))
            self.stop.wait(1.0)


def _check_stream(name: str, records: list[Row], acked: Seen) -> None:
    """Every acknowledged record once, with its value, offsets increasing per partition."""
    last: dict[tuple[str, int], int] = {}
    for t, p, o, k, v in records:
        prev = last.get((t, p), -1)
        assert o > prev, f"{name}: {t}-{p} went from {prev} to {o}"
        last[(t, p)] = o
        assert acked.get((t, p, o)) == (k, v), f"{name}: {t}-{p}/{o} is {(k, v)}"
    missed = sorted(set(acked) - {(t, p, o) for t, p, o, _, _ in records})
    assert not missed, f"{name} missed {len(missed)} records, first {missed[:5]}"


def _ends(rows: Iterator[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for t, p, o in rows:
        out[(t, p)] = max(out.get((t, p), -1), o)
    return out


def _read(storage: Storage, topic: str, p: int) -> list[tuple[int, bytes, bytes | None]]:
    view = storage.reader(topic, p).view()
    out: list[tuple[int, bytes, bytes | None]] = []
    for b in view.batches(view.log_start_offset):
        cols = (b.column(c).to_pylist() for c in ("offset", "key", "value"))
        out += zip(*cols, strict=True)
    return out


def test_consumers_and_a_spark_query_miss_nothing_while_the_jobs_run(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    root = broker.data_dir
    producers = Producers(broker.bootstrap)
    tail = Tail(broker.bootstrap)
    batches: list[list[Row]] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = df.select("topic", "partition", "offset", "key", "value").collect()
        batch = [(r[0], r[1], r[2], bytes(r[3]), None if r[4] is None else bytes(r[4]))
                 for r in rows]  # fmt: skip
        batches.append(sorted(batch, key=lambda r: (r[0], r[1], r[2])))

    sparklog.spark.register(spark)
    query = (
        spark.readStream.format("sparklog")
        .option("subscribe", f"{CHANGELOG},{EVENTS}")
        .option("startingOffsets", "earliest")
        .load(root)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    jobs = Jobs(spark, root)
    try:
        producers.start()
        tail.thread.start()
        time.sleep(16)  # the first records pass min.compaction.lag.ms
        jobs.thread.start()
        # at least PRODUCE_S in all, and on until the jobs ran three rounds (a loaded machine)
        until, latest = time.monotonic() + PRODUCE_S - 16, time.monotonic() + PRODUCE_S + 24
        while time.monotonic() < until or (jobs.rounds < 3 and time.monotonic() < latest):
            time.sleep(0.5)
        producers.finish()
        jobs.stop.set()
        jobs.thread.join(120)
        ends = _ends(iter(producers.acked))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            read_by_query = _ends((r[0], r[1], r[2]) for b in list(batches) for r in b)
            if read_by_query == ends and len(tail.seen) >= len(producers.acked):
                break
            time.sleep(0.5)
    finally:
        tail.stop.set()
        tail.thread.join(30)
        query.stop()
    assert producers.errors == []
    assert len(producers.acked) > 5000
    assert tail.errors == []
    assert query.exception() is None
    assert jobs.errors == []
    assert jobs.rounds >= 3, jobs.rounds
    assert jobs.removed > 0
    _check_stream("the consumer", tail.seen, producers.acked)
    _check_stream("the Spark query", [r for b in batches for r in b], producers.acked)
    storage = Storage(root)
    starts = [manifest(storage, p, EVENTS).log_start_offset for p in range(PARTITIONS)]
    assert min(starts) > 0, starts  # retention deleted something in every partition
    compacted = []
    for t, p in itertools.product(CONFIGS, range(PARTITIONS)):
        left = _read(storage, t, p)
        assert left, (t, p)
        for o, k, v in left:
            assert producers.acked[(t, p, o)] == (k, v)
        cleaned = manifest(storage, p, t).cleaned
        if cleaned:
            below = cleaned[-1].end_offset
            keys = [k for o, k, _ in left if o < below]
            assert len(keys) == len(set(keys)), f"{t}-{p}: a key twice below {below}"
            compacted.append(t)
    assert compacted == [CHANGELOG] * PARTITIONS
    assert broker.errors() == []
