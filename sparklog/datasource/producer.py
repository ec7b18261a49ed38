"""The Spark sink's producer: Kafka record batches with an explicit, stable idempotence
identity, sent through the broker over sparklog's small kio client.

Why not a Kafka client library: exactly-once across a killed and restarted query needs the
producer id, epoch and sequence numbers of a micro-batch to be the same when the batch is
replayed, so that the broker's idempotence check recognises what was written before (see
``sparklog.datasource.writer``). Kafka clients pick those themselves; this producer is told.

``PartitionStream`` takes the records a task writes to one topic partition, in order, and
the first sequence number to use; it cuts them into record batches by a deterministic rule
(at most ``MAX_BATCH_RECORDS`` records and about ``MAX_BATCH_BYTES`` of keys, values and
headers), so that the same records always give the same batches and sequence ranges.
``SinkProducer.send`` writes the batches. A batch the broker answers with
DUPLICATE_SEQUENCE_NUMBER (written long ago) or with its original offsets (a recent retry)
counts as written. One request carries at most one batch per partition and waits for
acks=all (fsynced), so batches of a partition are written in order.

``murmur2_partition`` is the Java client's (and Spark's Kafka sink's) key partitioner, so a
key lands on the partition Kafka would choose.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from sparklog.broker.client import KafkaClient, KafkaRequestError
from sparklog.errors import SparkLogError

PRODUCE, METADATA, INIT_PRODUCER_ID = 0, 3, 22
MAX_BATCH_RECORDS = 8192
MAX_BATCH_BYTES = 768 * 1024  # below the default max.message.bytes (1 MiB + 12)
MAX_REQUEST_BYTES = 8 * 1024 * 1024
SEQ_MOD = 2**31
_RECORD_OVERHEAD = 16  # varints and attributes of one record, roughly
_WRITTEN = (ErrorCode.none, ErrorCode.duplicate_sequence_number)


class SinkWriteError(SparkLogError):
    """The Spark sink could not write its records through the broker."""


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed int32."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _sizes(records: pa.Table) -> list[int]:
    """Payload bytes of each record (key, value, headers) plus a fixed overhead."""
    n = records.num_rows
    sizes = [_RECORD_OVERHEAD] * n
    for name in ("key", "value"):
        lengths = pc.binary_length(records.column(name)).fill_null(0).to_pylist()
        sizes = [a + b for a, b in zip(sizes, lengths, strict=True)]
    headers = records.column("headers")
    if pc.sum(pc.list_value_length(headers).fill_null(0)).as_py():
        for i, hs in enumerate(headers.to_pylist()):
            for h in hs or ():
                sizes[i] += len(h["key"].encode()) + len(h["value"] or b"")
    return sizes


def cut_batches(records: pa.Table, max_bytes: int = MAX_BATCH_BYTES) -> list[tuple[int, int]]:
    """Batch boundaries ``(start, stop)``, greedily by record count and payload bytes.

    Greedy cutting restarted at any boundary it produced gives the same later boundaries,
    so records may be cut in pieces as they arrive (``PartitionStream``) and still give the
    batches a single pass over all of them would.
    """
    cuts, start, acc = [], 0, 0
    for i, size in enumerate(_sizes(records)):
        if i > start and (i - start >= MAX_BATCH_RECORDS or acc + size > max_bytes):
            cuts.append((start, i))
            start, acc = i, 0
        acc += size
    if records.num_rows:
        cuts.append((start, records.num_rows))
    return cuts


class PartitionStream:
    """The records one task writes to one topic partition, cut into record batches with
    consecutive sequence numbers from ``first_sequence``. Records are ``key``, ``value``
    (binary) and ``headers`` (list<struct<key string, value binary>>) columns."""

    def __init__(
        self,
        topic: str,
        partition: int,
        first_sequence: int,
        pid: int,
        epoch: int,
        *,
        batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self.topic = topic
        self.batch_bytes = batch_bytes
        self.partition = partition
        self.next_sequence = first_sequence
        self.records = 0
        self._pid, self._epoch = pid, epoch
        self._buffer: list[pa.Table] = []
        self._buffered = 0

    def add(self, records: pa.Table) -> None:
        self._buffer.append(records)
        self._buffered += records.num_rows
        self.records += records.num_rows

    def take_batches(self, final: bool) -> list[bytes]:
        """Encoded batches ready to send: all of them when ``final``, else every complete
        batch once enough records are buffered (the last, maybe partial, one stays)."""
        if not self._buffered or (not final and self._buffered < 4 * MAX_BATCH_RECORDS):
            return []
        table = pa.concat_tables(self._buffer)
        cuts = cut_batches(table, self.batch_bytes)
        if not final:
            cuts = cuts[:-1]
        now_ms = int(time.time() * 1000)
        out = []
        for start, stop in cuts:
            out.append(_encode(table, start, stop, self._pid, self._epoch, self.next_sequence,
                               now_ms))  # fmt: skip
            self.next_sequence = (self.next_sequence + stop - start) % SEQ_MOD
        done = cuts[-1][1] if cuts else 0
        rest = table.slice(done)
        self._buffer = [rest] if rest.num_rows else []
        self._buffered = rest.num_rows
        return out


def _encode(
    records: pa.Table, start: int, stop: int, pid: int, epoch: int, seq: int, now_ms: int
) -> bytes:
    part = records.slice(start, stop - start)
    keys = part.column("key").to_pylist()
    values = part.column("value").to_pylist()
    headers = part.column("headers").to_pylist()
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=2**31 - 1,
    )
    for i in range(stop - start):
        hs = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else []
        builder.append(i, now_ms, keys[i], values[i], hs)
    return bytes(builder.build())


class SinkProducer:
    """An idempotent producer with a caller-chosen identity. Use as a context manager."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 60.0) -> None:
        self.bootstrap = bootstrap
        self._client = KafkaClient(bootstrap, timeout_s=timeout_s, client_id="sparklog-sink")

    def __enter__(self) -> SinkProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Partitions per topic; a missing topic is created if the broker auto-creates."""
        resp = self._client.request(
            METADATA,
            12,
            {
                "topics": [{"name": t, "topic_id": None} for t in topics],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        out = {}
        for t in resp.topics:
            if t.error_code != ErrorCode.none or not t.partitions:
                raise SinkWriteError(
                    f"topic {t.name!r} cannot be written: {ErrorCode(t.error_code).name.upper()}"
                    " (create it first, or let the broker auto-create topics)"
                )
            out[t.name] = len(t.partitions)
        return out

    def init_producer_id(self) -> tuple[int, int]:
        resp = self._client.request(
            INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        if resp.error_code != ErrorCode.none:
            raise KafkaRequestError("init producer id", resp.error_code)
        return int(resp.producer_id), int(resp.producer_epoch)

    def send(self, queues: dict[tuple[str, int], list[bytes]], pid: int) -> int:
        """Write queued batches (acks=all), each partition's in order: one request carries
        at most one batch per partition, so a failure leaves a prefix of each queue written
        - exactly what a replay with the same sequences then skips. Returns the number of
        requests sent."""
        pending = {k: list(q) for k, q in queues.items() if q}
        requests = 0
        while pending:
            request: dict[tuple[str, int], bytes] = {}
            size = 0
            for k, q in pending.items():
                if request and size + len(q[0]) > MAX_REQUEST_BYTES:
                    break
                request[k] = q[0]
                size += len(q[0])
            self._produce(request, pid)
            requests += 1
            for k in request:
                pending[k].pop(0)
            pending = {k: q for k, q in pending.items() if q}
        return requests

    def _produce(self, request: dict[tuple[str, int], bytes], pid: int) -> None:
        by_topic: dict[str, list[dict[str, object]]] = {}
        for (topic, partition), data in request.items():
            by_topic.setdefault(topic, []).append({"index": partition, "records": data})
        resp = self._client.request(
            PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 60_000,
                "topic_data": [
                    {"name": t, "partition_data": parts} for t, parts in by_topic.items()
                ],
            },
        )
        for t in resp.responses:
            for p in t.partition_responses:
                if p.error_code not in _WRITTEN:
                    code = ErrorCode(p.error_code)
                    hint = ""
                    if code == ErrorCode.out_of_order_sequence_number:
                        hint = (
                            "; a replayed micro-batch did not reproduce the records it wrote "
                            "before (the sink is exactly-once only over a deterministic source)"
                        )
                    raise SinkWriteError(
                        f"producing to {t.name}-{p.index} (producer id {pid}) failed: "
                        f"{code.name.upper()}" + (f" ({p.error_message})" if p.error_message
                                                   else "") + hint
                    )  # fmt: skip
