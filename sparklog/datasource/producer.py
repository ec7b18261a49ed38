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
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode

from sparklog.errors import KafkaConnectionError, KafkaRequestError, SinkWriteError
from sparklog.kafka import admin
from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog.kafka.records import TRANSACTIONAL_BIT, build_batch
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
#: a transaction coordinator's answers meaning "ask again (maybe another broker)"
_TXN_RETRIABLE = (
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
)
#: the offsets "topic" a transactional sink commits its progress under (one partition per task)
SINK_PROGRESS_TOPIC = "__sparklog_sink"
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
        transactional: bool = False,
    ) -> None:
        self.topic = topic
        self.batch_bytes = batch_bytes
        self.transactional = transactional
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
            out.append(
                _encode(
                    table,
                    start,
                    stop,
                    self._pid,
                    self._epoch,
                    self.next_sequence,
                    now_ms,
                    self.transactional,
                )
            )
            self.next_sequence = (self.next_sequence + stop - start) % SEQ_MOD
        done = cuts[-1][1] if cuts else 0
        rest = table.slice(done)
        self._buffer = [rest] if rest.num_rows else []
        self._buffered = rest.num_rows
        return out


def _encode(
    records: pa.Table,
    start: int,
    stop: int,
    pid: int,
    epoch: int,
    seq: int,
    now_ms: int,
    transactional: bool = False,
) -> bytes:
    part = records.slice(start, stop - start)
    keys = part.column("key").to_pylist()
    values = part.column("value").to_pylist()
    headers = part.column("headers").to_pylist()
    rows = (
        (i, now_ms, keys[i], values[i], [(h["key"], h["value"]) for h in headers[i] or ()])
        for i in range(stop - start)
    )
    return build_batch(
        rows,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=TRANSACTIONAL_BIT if transactional else 0,
    )


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
        #: a transactional producer's id (``begin``), its producer id and epoch
        self.transactional_id: str | None = None
        self._txn: tuple[int, int] = (-1, -1)
        self._added: set[tuple[str, int]] = set()

    def __enter__(self) -> SinkProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()
        for c in self._conns.values():
            c.close()

    def _route(self, topics: set[str]) -> None:
        md = self._client.request(
            ApiKey.METADATA,
            12,
            {
                "topics": [{"name": t, "topic_id": None} for t in sorted(topics)],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
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
            conn = KafkaClient(self.settings.with_bootstrap(address))
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

    # ------------------------------------------------------------------ transactions

    def _at_txn_coordinator(self, api: int, version: int, body: dict[str, object]) -> object:
        """A request to the transaction coordinator of ``transactional_id`` (FindCoordinator
        when the broker asked says it is not; retried while the coordinator loads, moves or
        finishes the previous transaction)."""
        assert self.transactional_id is not None
        deadline = time.monotonic() + ROUTE_TIMEOUT_S
        client = self._client
        while True:
            resp = client.request(api, version, body)
            code = int(getattr(resp, "error_code", 0))
            if code == 0:
                return resp
            if code not in _TXN_RETRIABLE or time.monotonic() > deadline:
                raise SinkWriteError(
                    f"transactional id {self.transactional_id!r}: {ErrorCode(code).name.upper()}"
                )
            time.sleep(ROUTE_BACKOFF_S)
            found = self._client.request(
                ApiKey.FIND_COORDINATOR,
                4,
                {"key_type": 1, "coordinator_keys": [self.transactional_id]},
            )
            c = found.coordinators[0]
            client = self._conn(f"{c.host}:{c.port}") if c.error_code == 0 else self._client

    def begin(self, transactional_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        """Become the transactional producer ``transactional_id``: InitProducerId fences any
        earlier producer of the id (a failed attempt of this task) and aborts its open
        transaction. Returns (producer id, epoch); batches then start at sequence 0."""
        self.transactional_id = transactional_id
        resp: Any = self._at_txn_coordinator(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": transactional_id,
                "transaction_timeout": timeout_ms,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        self._txn = (int(resp.producer_id), int(resp.producer_epoch))
        return self._txn

    def add_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for the partitions not added yet."""
        new = sorted(set(partitions) - self._added)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for t, p in new:
            by_topic.setdefault(t, []).append(p)
        pid, epoch = self._txn
        resp: Any = self._at_txn_coordinator(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [
                    {"name": t, "partitions": ps} for t, ps in by_topic.items()
                ],
            },
        )
        for t in resp.results_by_topic_v3_and_below:
            for r in t.results_by_partition:
                if r.partition_error_code != ErrorCode.none:
                    raise SinkWriteError(
                        f"adding {t.name}-{r.partition_index} to transaction "
                        f"{self.transactional_id!r}: {ErrorCode(r.partition_error_code).name}"
                    )
        self._added |= set(new)

    def progress(self, group: str, task: int) -> int:
        """The next micro-batch id this task's transactions committed (``commit``), -1 when
        none: read with require_stable, so an undecided transaction is waited for."""
        deadline = time.monotonic() + ROUTE_TIMEOUT_S
        body = {
            "group_id": group,
            "require_stable": True,
            "topics": [{"name": SINK_PROGRESS_TOPIC, "partition_indexes": [task]}],
        }
        while True:
            resp: Any = admin.at_coordinator(
                self._client, group, lambda c: c.request(ApiKey.OFFSET_FETCH, 7, body)
            )
            part = resp.topics[0].partitions[0] if resp.topics else None
            if part is None:
                return -1
            if part.error_code == ErrorCode.none:
                return int(part.committed_offset)
            if part.error_code != ErrorCode.unstable_offset_commit or time.monotonic() > deadline:
                raise SinkWriteError(f"sink progress of task {task}: {ErrorCode(part.error_code)}")
            time.sleep(ROUTE_BACKOFF_S)

    def commit(self, group: str | None = None, task: int = 0, next_batch: int = 0) -> None:
        """Commit the transaction; with ``group``, the task's progress (``next_batch`` as the
        offset of partition ``task`` of ``SINK_PROGRESS_TOPIC``) commits with it."""
        pid, epoch = self._txn
        tid = self.transactional_id
        if group is not None:
            self._at_txn_coordinator(
                ApiKey.ADD_OFFSETS_TO_TXN,
                3,
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "group_id": group,
                },
            )
            body = {
                "transactional_id": tid,
                "group_id": group,
                "producer_id": pid,
                "producer_epoch": epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": SINK_PROGRESS_TOPIC,
                        "partitions": [
                            {
                                "partition_index": task,
                                "committed_offset": next_batch,
                                "committed_leader_epoch": -1,
                                "committed_metadata": None,
                            }
                        ],
                    }
                ],
            }
            resp: Any = admin.at_coordinator(
                self._client, group, lambda c: c.request(ApiKey.TXN_OFFSET_COMMIT, 3, body)
            )
            code = resp.topics[0].partitions[0].error_code
            if code != ErrorCode.none:
                raise SinkWriteError(f"committing sink progress: {ErrorCode(code).name}")
        if not self._added and group is None:
            return  # nothing was written: no transaction to end
        self._at_txn_coordinator(
            ApiKey.END_TXN,
            3,
            {
                "transactional_id": tid,
                "producer_id": pid,
                "producer_epoch": epoch,
                "committed": True,
            },
        )
        self._added = set()

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
                    f"took the batches within {ROUTE_TIMEOUT_S:.0f} s"
                    + (f" ({last})" if last else "")
                )
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
                "transactional_id": self.transactional_id,
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
                        f"{code.name.upper()}"
                        + (f" ({p.error_message})" if p.error_message else "")
                        + hint
                    )
        return retry
