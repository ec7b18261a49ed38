"""The four real Kafka clients the client-matrix tests drive, behind one small interface:
confluent-kafka, kafka-python, aiokafka and kcat (a subprocess)."""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pytest

from sparklog.storage import Storage

from .rawclient import RawClient, record_batch

KCAT = shutil.which("kcat")
TIMEOUT = 10.0  # seconds any single client operation may take
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Seeded topics: "seeded-<variant>". Fetches from a codec's topic come compressed with that
# codec; "sealed" rolls at every batch: the first batch of partition 0 (offsets 0-2) is then
# read from a sealed (Parquet) segment, the second from the active one.
SEEDED_TOPICS: dict[str, dict[str, str]] = {
    "producer": {},
    **{c: {"compression.type": c} for c in ("gzip", "snappy", "lz4", "zstd")},
    "sealed": {"segment.bytes": "100"},
}
T0 = (int(time.time()) - 3600) * 1000  # recent: nothing here is old enough for retention


@dataclass(frozen=True)
class Rec:
    """One record as produced or consumed (``offset`` -1 and ``timestamp`` None: unknown)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset: int = -1


@dataclass(frozen=True)
class Start:
    """Where a consumer starts: the earliest offset, ``offset``, or ``timestamp`` (ms)."""

    offset: int | None = None
    timestamp: int | None = None


def with_offsets(recs: list[Rec]) -> list[Rec]:
    """``recs`` with the offsets a fresh topic assigns them, sorted by partition and offset."""
    next_offset: dict[int, int] = {}
    out = []
    for r in recs:
        out.append(replace(r, offset=next_offset.get(r.partition, 0)))
        next_offset[r.partition] = next_offset.get(r.partition, 0) + 1
    return sorted(out, key=lambda r: (r.partition, r.offset))


def read_storage(data_dir: str, topic: str) -> list[Rec]:
    """Every record of every partition of ``topic`` in storage (the broker is stopped)."""
    storage = Storage(data_dir)
    out = []
    for p in range(storage.topics.get(topic).partitions):
        view = storage.reader(topic, p).view()  # never opened: an empty log
        for rb in view.batches(view.log_start_offset):
            ts = rb.column("timestamp").cast(pa.int64()).to_pylist()
            for i, row in enumerate(rb.to_pylist()):
                headers = tuple((h["key"], h["value"]) for h in row["headers"])
                out.append(Rec(p, row["key"], row["value"], headers, ts[i], row["offset"]))
    return out


def without_internal(topics: dict[str, int]) -> dict[str, int]:
    """``topics`` without Kafka's internal ones (``__consumer_offsets`` and the like)."""
    return {t: n for t, n in topics.items() if not t.startswith("__")}


def deadline_loop(timeout: float = TIMEOUT) -> Iterator[None]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        yield


# ---------------------------------------------------------------------------- clients


class Client:
    """What the tests need from a client; one subclass per client library."""

    name = ""
    missing_codecs: dict[str, str] = {}  # codec -> why this client lacks it
    sets_timestamps = True

    def produce(self, bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
        raise NotImplementedError

    def consume(
        self, bootstrap: str, topic: str, partition: int, start: Start, count: int
    ) -> list[Rec]:
        raise NotImplementedError

    def consume_new(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        produce_more: Callable[[], None],
        count: int,
    ) -> list[Rec]:
        """Position at the end of the partition, then call ``produce_more``, then read."""
        raise NotImplementedError

    def list_topics(self, bootstrap: str) -> dict[str, int]:
        raise NotImplementedError


class Confluent(Client):
    name = "confluent"

    def _consumer(self, bootstrap: str, **extra: Any) -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "sparklog-tests",  # required; no group calls without subscribe
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "socket.timeout.ms": 5000,
                **extra,
            }
        )

    @staticmethod
    def _rec(m: Any) -> Rec:
        return Rec(
            m.partition(),
            m.key(),
            m.value(),
            tuple(m.headers() or ()),
            m.timestamp()[1],
            m.offset(),
        )

    def _poll(self, consumer: Any, count: int, out: list[Rec]) -> list[Rec]:
        from confluent_kafka import KafkaError, KafkaException

        for _ in deadline_loop():
            if len(out) >= count:
                break
            m = consumer.poll(0.1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(self._rec(m))
        return out

    def produce(self, bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": int(TIMEOUT * 1000),
                "socket.timeout.ms": 5000,
            }
        )
        errors: list[Any] = []
        try:
            for r in recs:
                p.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers),
                    timestamp=r.timestamp or 0,
                    on_delivery=lambda err, _msg: errors.append(err) if err else None,
                )
            assert p.flush(TIMEOUT) == 0
        finally:
            p.close()
        assert errors == []

    def consume(
        self, bootstrap: str, topic: str, partition: int, start: Start, count: int
    ) -> list[Rec]:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        c = self._consumer(bootstrap)
        try:
            offset = OFFSET_BEGINNING if start.offset is None else start.offset
            if start.timestamp is not None:
                want = TopicPartition(topic, partition, start.timestamp)
                (found,) = c.offsets_for_times([want], TIMEOUT)
                assert found.error is None and found.offset >= 0, found
                offset = found.offset
            c.assign([TopicPartition(topic, partition, offset)])
            return self._poll(c, count, [])
        finally:
            c.close()

    def consume_new(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        produce_more: Callable[[], None],
        count: int,
    ) -> list[Rec]:
        from confluent_kafka import OFFSET_END, KafkaError, TopicPartition

        c = self._consumer(bootstrap, **{"enable.partition.eof": True})
        try:
            c.assign([TopicPartition(topic, partition, OFFSET_END)])
            out: list[Rec] = []
            for _ in deadline_loop():  # the end is resolved and fetched: EOF is reported
                m = c.poll(0.1)
                if m is not None and not m.error():
                    out.append(self._rec(m))  # a record from before: the test fails on it
                if m is not None and m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                    break
            else:
                raise AssertionError("no end-of-partition event")
            produce_more()
            return self._poll(c, count, out)
        finally:
            c.close()

    def list_topics(self, bootstrap: str) -> dict[str, int]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
        meta = admin.list_topics(timeout=TIMEOUT)
        return {name: len(t.partitions) for name, t in meta.topics.items()}


def _kafka_python_missing() -> dict[str, str]:
    from kafka import codec

    have = {"snappy": codec.has_snappy(), "lz4": codec.has_lz4(), "zstd": codec.has_zstd()}
    package = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}
    return {
        c: f"kafka-python has no {c} codec here (needs the optional {package[c]} package)"
        for c, ok in have.items()
        if not ok
    }


class KafkaPython(Client):
    name = "kafka-python"
    missing_codecs = _kafka_python_missing()

    def _consumer(self, bootstrap: str) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            request_timeout_ms=5000,
        )

    def _poll(self, consumer: Any, count: int, out: list[Rec]) -> list[Rec]:
        for _ in deadline_loop():
            if len(out) >= count:
                break
            for msgs in consumer.poll(timeout_ms=100).values():
                out += [
                    Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp, m.offset)
                    for m in msgs
                ]
        return out

    def produce(self, bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
        from kafka import KafkaProducer

        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=None if codec == "none" else codec,
            acks="all",
            linger_ms=5,
            request_timeout_ms=5000,
        )
        try:
            futures = [
                p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    partition=r.partition,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                )
                for r in recs
            ]
            p.flush(TIMEOUT)
            for f in futures:
                f.get(TIMEOUT)
        finally:
            p.close(TIMEOUT)

    def consume(
        self, bootstrap: str, topic: str, partition: int, start: Start, count: int
    ) -> list[Rec]:
        from kafka import TopicPartition

        c = self._consumer(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            if start.timestamp is not None:
                found = c.offsets_for_times({tp: start.timestamp})[tp]
                assert found is not None
                c.seek(tp, found.offset)
            elif start.offset is not None:
                c.seek(tp, start.offset)
            else:
                c.seek_to_beginning(tp)
            return self._poll(c, count, [])
        finally:
            c.close()

    def consume_new(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        produce_more: Callable[[], None],
        count: int,
    ) -> list[Rec]:
        from kafka import TopicPartition

        c = self._consumer(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            c.seek_to_end(tp)
            c.position(tp)  # resolves the end offset now
            produce_more()
            return self._poll(c, count, [])
        finally:
            c.close()

    def list_topics(self, bootstrap: str) -> dict[str, int]:
        c = self._consumer(bootstrap)
        try:
            return {t: len(c.partitions_for_topic(t)) for t in c.topics()}
        finally:
            c.close()


class AioKafka(Client):
    name = "aiokafka"

    def _consumer(self, bootstrap: str) -> Any:
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            request_timeout_ms=5000,
        )

    async def _poll(self, consumer: Any, count: int, out: list[Rec]) -> list[Rec]:
        for _ in deadline_loop():
            if len(out) >= count:
                break
            for msgs in (await consumer.getmany(timeout_ms=100)).values():
                out += [
                    Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp, m.offset)
                    for m in msgs
                ]
        return out

    def produce(self, bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
        from aiokafka import AIOKafkaProducer

        async def run() -> None:
            p = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                compression_type=None if codec == "none" else codec,
                acks="all",
                linger_ms=5,
                request_timeout_ms=5000,
            )
            await p.start()
            try:
                futures = [
                    await p.send(
                        topic,
                        key=r.key,
                        value=r.value,
                        partition=r.partition,
                        headers=list(r.headers),
                        timestamp_ms=r.timestamp,
                    )
                    for r in recs
                ]
                await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT)
            finally:
                await p.stop()

        asyncio.run(run())

    def consume(
        self, bootstrap: str, topic: str, partition: int, start: Start, count: int
    ) -> list[Rec]:
        from aiokafka import TopicPartition

        async def run() -> list[Rec]:
            c = self._consumer(bootstrap)
            await c.start()
            try:
                tp = TopicPartition(topic, partition)
                c.assign([tp])
                if start.timestamp is not None:
                    found = (await c.offsets_for_times({tp: start.timestamp}))[tp]
                    assert found is not None
                    c.seek(tp, found.offset)
                elif start.offset is not None:
                    c.seek(tp, start.offset)
                else:
                    await c.seek_to_beginning(tp)
                return await self._poll(c, count, [])
            finally:
                await c.stop()

        return asyncio.run(run())

    def consume_new(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        produce_more: Callable[[], None],
        count: int,
    ) -> list[Rec]:
        from aiokafka import TopicPartition

        async def run() -> list[Rec]:
            c = self._consumer(bootstrap)
            await c.start()
            try:
                tp = TopicPartition(topic, partition)
                c.assign([tp])
                await c.seek_to_end(tp)
                await c.position(tp)  # resolves the end offset now
                await asyncio.to_thread(produce_more)
                return await self._poll(c, count, [])
            finally:
                await c.stop()

        return asyncio.run(run())

    def list_topics(self, bootstrap: str) -> dict[str, int]:
        # the admin client: the consumer's partitions_for_topic only knows topics it uses
        from aiokafka.admin import AIOKafkaAdminClient

        async def run() -> dict[str, int]:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
            await admin.start()
            try:
                topics = await admin.describe_topics(await admin.list_topics())
                return {t["topic"]: len(t["partitions"]) for t in topics}
            finally:
                await admin.close()

        return asyncio.run(run())


class Kcat(Client):
    """kcat in a subprocess. It cannot set timestamps, and with ``-Z`` an empty key or
    value is sent as null, so it cannot send empty non-null ones."""

    name = "kcat"
    sets_timestamps = False

    def _run(self, args: list[str], stdin: bytes = b"") -> str:
        assert KCAT is not None
        done = subprocess.run(
            [KCAT, *args], input=stdin, capture_output=True, timeout=TIMEOUT + 5, check=False
        )
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    @staticmethod
    def _rec(line: str) -> Rec:
        d = json.loads(line)
        flat = d.get("headers") or []
        headers = tuple(
            (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
            for i in range(0, len(flat), 2)
        )
        key = None if d["key"] is None else d["key"].encode()
        value = None if d["payload"] is None else d["payload"].encode()
        return Rec(d["partition"], key, value, headers, d["ts"], d["offset"])

    def produce(self, bootstrap: str, topic: str, recs: list[Rec], codec: str) -> None:
        # -H applies to a whole invocation: one invocation per run of records that share
        # a partition and headers
        groups: list[list[Rec]] = []
        for r in recs:
            if groups and (groups[-1][0].partition, groups[-1][0].headers) == (
                r.partition,
                r.headers,
            ):
                groups[-1].append(r)
            else:
                groups.append([r])
        for group in groups:
            lines = []
            for r in group:
                for part in (r.key, r.value):  # None is fine: sent as an empty field
                    if part is not None:
                        assert part and not {9, 10} & set(part), f"kcat cannot send {r}"
                lines.append((r.key or b"") + b"\t" + (r.value or b"") + b"\n")
            headers = []
            for k, v in group[0].headers:
                assert v, "kcat cannot send a null or empty header value"
                headers += ["-H", f"{k}={v.decode()}"]
            args = [
                "-b", bootstrap, "-P", "-t", topic, "-p", str(group[0].partition),
                "-K", "\t", "-Z", "-X", f"compression.codec={codec}", "-X", "acks=all",
            ]  # fmt: skip
            self._run(args + headers, b"".join(lines))

    def consume(
        self, bootstrap: str, topic: str, partition: int, start: Start, count: int
    ) -> list[Rec]:
        if start.timestamp is not None:
            spec = f"s@{start.timestamp}"
        else:
            spec = "beginning" if start.offset is None else str(start.offset)
        args = [
            "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", spec,
            "-c", str(count), "-e", "-J", "-X", "fetch.wait.max.ms=100",
        ]  # fmt: skip
        out = self._run(args)
        return [self._rec(line) for line in out.splitlines() if line]

    def consume_new(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        produce_more: Callable[[], None],
        count: int,
    ) -> list[Rec]:
        assert KCAT is not None
        args = [
            KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", "end",
            "-c", str(count), "-J", "-u", "-X", "fetch.wait.max.ms=100",
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            lines: queue.Queue[bytes] = queue.Queue()
            assert proc.stderr is not None
            stderr = proc.stderr

            def drain() -> None:
                for line in stderr:
                    lines.put(line)

            threading.Thread(target=drain, daemon=True).start()
            # kcat says "Reached end of topic" once it has fetched at the end offset
            while b"Reached end of topic" not in lines.get(timeout=TIMEOUT):
                pass
            produce_more()
            out, _ = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0
            return [self._rec(line) for line in out.decode().splitlines() if line]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def list_topics(self, bootstrap: str) -> dict[str, int]:
        meta = json.loads(self._run(["-b", bootstrap, "-L", "-J"]))
        return {t["topic"]: len(t["partitions"]) for t in meta["topics"]}


CLIENTS = [
    pytest.param(Confluent(), id="confluent"),
    pytest.param(KafkaPython(), id="kafka-python"),
    pytest.param(AioKafka(), id="aiokafka"),
    pytest.param(
        Kcat(), id="kcat", marks=pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
    ),
]


def skip_missing_codec(client: Client, codec: str) -> None:
    if codec in client.missing_codecs:
        pytest.skip(client.missing_codecs[codec])


def seed(raw: RawClient, topic: str, recs: list[Rec]) -> None:
    batch = record_batch(
        [r.value for r in recs],
        keys=[r.key for r in recs],
        headers=[r.headers for r in recs],
        timestamps=[r.timestamp or T0 for r in recs],
    )
    part = raw.produce(topic, recs[0].partition, batch)
    assert part.error_code == 0, part
