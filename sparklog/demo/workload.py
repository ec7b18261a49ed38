"""The workload of the fault tests and ``bench/cluster.py``: idempotent ``acks=all``
producers (confluent-kafka) writing unique values while faults happen, then one reader that
reads every partition from its start to its end; the history goes to ``checker.check``.

Each producer thread sends ``value = b"<producer>-<seq>"`` with ``key = b"k<seq % keys>"``
at about ``rate`` records per second, and records each delivery report: acknowledged (with
partition and offset, and the time, for the unavailability figures) or failed.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from sparklog.demo.checker import History

PRODUCER_CONF = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 60_000,
    "topic.metadata.refresh.interval.ms": 1000,
    "retry.backoff.ms": 100,
    "reconnect.backoff.max.ms": 500,
}


class Workload:
    """See the module docstring. ``start()``, faults, ``stop()``, then ``read_all()``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        producers: int = 1,
        rate: int = 500,
        keys: int = 16,
        client: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        #: producer settings over ``PRODUCER_CONF`` (e.g. a benchmark's back-off)
        self.client = dict(client or {})
        self.topic = topic
        self.rate = rate
        self.keys = keys
        self.history = History()
        self.ack_times: dict[int, list[float]] = defaultdict(list)  # partition -> ack times
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(producers)
        ]

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def stop(self, flush_s: float = 90) -> History:
        self._stop.set()
        self._flush_s = flush_s
        for t in self._threads:
            t.join(flush_s + 30)
        return self.history

    def acked_since(self, t0: float, partition: int) -> float | None:
        """The first acknowledgement time on ``partition`` after ``t0`` (None: none yet)."""
        with self._lock:
            later = [t for t in self.ack_times.get(partition, []) if t > t0]
        return min(later) if later else None

    def longest_gap(self, partition: int, since: float, until: float) -> float:
        """The longest time between consecutive acknowledgements on ``partition`` that
        overlaps ``[since, until]`` (a fault's unavailability, measured on the acks
        themselves: acks already in flight when the fault struck do not hide it)."""
        with self._lock:
            times = sorted(self.ack_times.get(partition, []))
        before = [t for t in times if t <= since]
        window = before[-1:] + [t for t in times if since < t <= until]
        if len(window) < 2:
            return until - since
        return max(b - a for a, b in itertools.pairwise(window))

    def _produce(self, me: int) -> None:
        debug = (
            {"debug": os.environ["SPARKLOG_RDKAFKA_DEBUG"]}
            if os.environ.get("SPARKLOG_RDKAFKA_DEBUG")
            else {}
        )
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, **PRODUCER_CONF, **self.client, **debug}
        )

        def report(err: Any, msg: Any) -> None:
            value = msg.value()
            with self._lock:
                if err is None:
                    offset = msg.offset()
                    self.history.acked[value] = (msg.partition(), -1 if offset is None else offset)
                    self.ack_times[msg.partition()].append(time.monotonic())
                else:
                    self.history.failed.add(value)
                    if len(self.errors) < 20:
                        self.errors.append(str(err))

        seq = 0
        step = 10
        while not self._stop.is_set():
            for _ in range(step):
                value, key = b"%d-%d" % (me, seq), b"k%d" % (seq % self.keys)
                with self._lock:
                    self.history.sends.append((me, key, value))
                try:
                    producer.produce(self.topic, value, key, on_delivery=report)
                except BufferError:
                    producer.poll(0.1)
                    producer.produce(self.topic, value, key, on_delivery=report)
                seq += 1
            producer.poll(0)
            time.sleep(step / self.rate)
        producer.flush(getattr(self, "_flush_s", 90))

    def _ends(self, consumer: Consumer, deadline: float) -> tuple[list[int], dict[int, int]]:
        """The topic's partitions and their end offsets, asked again while a broker that
        cannot reach etcd refuses Metadata (it closes the connection)."""
        while True:
            try:
                meta = consumer.list_topics(self.topic, timeout=10)
                parts = sorted(meta.topics[self.topic].partitions)
                tps = [TopicPartition(self.topic, p) for p in parts]
                ends = {tp.partition: consumer.get_watermark_offsets(tp, 10)[1] for tp in tps}
                return parts, ends
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def end_offsets(self, timeout_s: float = 60) -> dict[int, int]:
        """Every partition's high watermark, as the brokers answer ListOffsets."""
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": f"ends-{time.time_ns()}"}
        )
        try:
            return self._ends(consumer, time.monotonic() + timeout_s)[1]
        finally:
            consumer.close()

    def read_all(self, timeout_s: float = 60) -> History:
        """Read every partition from its log start to its end into the history's reads."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"checker-{time.time_ns()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        try:
            parts, ends = self._ends(consumer, time.monotonic() + timeout_s)
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
            todo = {p for p in parts if ends[p] > 0}
            deadline = time.monotonic() + timeout_s
            while todo and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                part, offset, err = int(msg.partition() or 0), int(msg.offset() or 0), msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and offset >= ends[part]:
                        todo.discard(part)
                    continue
                self.history.reads.append(("reader", part, offset, msg.value()))
                if offset + 1 >= ends[part]:
                    todo.discard(part)
            if todo:
                raise TimeoutError(f"partitions {sorted(todo)} not read to their end")
        finally:
            consumer.close()
        return self.history
