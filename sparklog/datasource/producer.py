"""The Spark sink's producer: Kafka record batches with an explicit, stable idempotence
identity, sent through the broker over sparklog's own Kafka client (``sparklog.kafka``).

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
"""

from __future__ import annotations

import contextlib
import time

import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode

from sparklog.errors import KafkaConnectionError, KafkaRequestError, SinkWriteError
from sparklog.kafka import admin
from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog.kafka.records import build_batch
from sparklog.kafka.wire import ApiKey
from sparklog.storage.producers import SEQ_MOD

MAX_BATCH_RECORDS = 8192
MAX_BATCH_BYTES = 768 * 1024  # below the default max.message.bytes (1 MiB + 12)
MAX_REQUEST_BYTES = 8 * 1024 * 1024
_RECORD_OVERHEAD = 16  # varints and attributes of one record, roughly
_WRITTEN = (ErrorCode.none, ErrorCode.duplicate_sequence_number)
#: a cluster's answers meaning "send it to the (new) leader"
_RETRIABLE = (
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.request_timed_out,
)
ROUTE_TIMEOUT_S = 60.0
ROUTE_BACKOFF_S = 0.2


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
    rows = (
        (i, now_ms, keys[i], values[i], [(h["key"], h["value"]) for h in headers[i] or ()])
        for i in range(stop - start)
    )
    return build_batch(rows, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


class SinkProducer:
    """An idempotent producer with a caller-chosen identity. Use as a context manager.

    Requests go to the bootstrap broker until one answers that it does not lead a
    partition (a cluster): from then on each partition's batches go to its leader, learnt
    from Metadata, and a batch refused with a retriable error (no leader yet, a leader that
    moved or died, a fenced acknowledgement) is sent again, unchanged, to the new leader:
    the same sequence numbers make a batch already written answer with its original
    offsets, so a retry never writes twice."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._client = KafkaClient(settings)
        self._leaders: dict[tuple[str, int], str] | None = None  # partition -> host:port
        self._conns: dict[str, KafkaClient] = {}

    def __enter__(self) -> SinkProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()
        for c in self._conns.values():
            c.close()

    def _route(self, topics: set[str]) -> None:
        md = self._client.request(ApiKey.METADATA, 12, {
            "topics": [{"name": t, "topic_id": None} for t in sorted(topics)],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
        })  # fmt: skip
        where = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
        self._leaders = {
            (t.name, p.partition_index): where[p.leader_id]
            for t in md.topics
            for p in t.partitions
            if p.leader_id in where
        }

    def _conn(self, address: str | None) -> KafkaClient:
        if address is None:
            return self._client
        conn = self._conns.get(address)
        if conn is None:
            conn = KafkaClient(ClientSettings(address, self.settings.timeout_s,
                                              self.settings.client_id))  # fmt: skip
            self._conns[address] = conn
        return conn

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Partitions per topic; a missing topic is created if the broker auto-creates."""
        try:
            return admin.partition_counts(self._client, topics, auto_create=True)
        except KafkaRequestError as e:
            raise SinkWriteError(
                f"{e} (create it first, or let the broker auto-create topics)"
            ) from None

    def init_producer_id(self) -> tuple[int, int]:
        return admin.init_producer_id(self._client)

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
        """Send ``request`` (one batch per partition), each to its partition's leader,
        retrying retriable refusals until ``ROUTE_TIMEOUT_S`` has passed."""
        deadline = time.monotonic() + ROUTE_TIMEOUT_S
        pending = dict(request)
        while True:
            targets: dict[str | None, dict[tuple[str, int], bytes]] = {}
            for k, data in pending.items():
                address = None if self._leaders is None else self._leaders.get(k, "")
                targets.setdefault(address, {})[k] = data
            retry: dict[tuple[str, int], bytes] = {}
            last: Exception | None = None
            for address, part in targets.items():
                if address == "":  # no live leader known yet
                    retry |= part
                    continue
                try:
                    retry |= {k: part[k] for k in self._send(self._conn(address), part, pid)}
                except KafkaConnectionError as e:  # the leader died: forget the connection
                    last = e
                    dead = self._conns.pop(address, None) if address is not None else None
                    if dead is not None:
                        dead.close()
                    retry |= part
            if not retry:
                return
            if time.monotonic() > deadline:
                raise SinkWriteError(
                    f"producing to {sorted(retry)} (producer id {pid}) failed: no leader "
                    f"took the batches within {ROUTE_TIMEOUT_S:.0f} s" + (f" ({last})" if last
                                                                          else "")
                )  # fmt: skip
            time.sleep(ROUTE_BACKOFF_S)
            try:
                self._route({t for t, _ in retry})
            except (KafkaConnectionError, KafkaRequestError):
                # the broker this producer bootstrapped from died: reconnect to any of the
                # bootstrap servers, and route on the next round
                with contextlib.suppress(KafkaConnectionError):
                    self._client.close()
                    self._client = KafkaClient(self.settings)
            pending = retry

    def _send(
        self, client: KafkaClient, request: dict[tuple[str, int], bytes], pid: int
    ) -> list[tuple[str, int]]:
        """One Produce request; the partitions to retry (refused with a retriable error)."""
        by_topic: dict[str, list[dict[str, object]]] = {}
        for (topic, partition), data in request.items():
            by_topic.setdefault(topic, []).append({"index": partition, "records": data})
        retry: list[tuple[str, int]] = []
        resp = client.request(
            ApiKey.PRODUCE,
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
                if p.error_code in _RETRIABLE:
                    retry.append((t.name, p.index))
                    continue
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
        return retry
