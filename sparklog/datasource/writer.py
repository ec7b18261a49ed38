"""``df.write`` / ``df.writeStream`` ``.format("sparklog")``: the Kafka sink's columns,
produced through the broker.

Columns as Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or
binary), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int) and
``headers`` (array<struct<key string, value binary>>); other columns are ignored. Options:
``kafka.bootstrap.servers`` (required), ``topic``, ``kafka.batch.size`` (bytes of a record
batch, default and maximum 768 KiB; keep it unchanged when restarting a query), Kafka's
security options (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``: see
``ClientSettings.from_options``); other ``kafka.*`` producer settings are accepted and
ignored. Typed keys and values: with ``valueFormat=avro`` (``keyFormat=avro``) the column
may be of any Spark type (a struct, typically) and is written as registry-framed Avro
(magic byte 0, the schema id, the datum; ``sparklog.schemas.codec.AvroEncoder``) with the
schema of ``valueSubject`` (default ``<topic>-value``; options in
``sparklog.datasource.options.schemas``; every write option is checked on the driver by
``sparklog.datasource.options.writes``), chosen on the driver when the write starts
(``sparklog.schemas.spark.encoding_for``). A record
goes to its ``partition`` if given, else to murmur2(key) like Kafka's default partitioner,
else (null key) round robin from the task's partition id — deterministic, so that a replayed
micro-batch puts every record where it went the first time.

Delivery guarantee
------------------
Streaming with ``checkpointLocation`` given as an option: **exactly once per (query, batch
id)**. Each Spark partition ``i`` of a query writes as one idempotent producer whose id,
epoch and next sequence per topic partition are kept in the query's checkpoint (the *sink
state*, below). Batch ``N`` of task ``i``:

1. reads its newest state file; if it is for batch ``N`` or later, the batch was written
   before (Spark replays the last batch after a restart when its commit was not recorded):
   nothing is sent;
2. otherwise sends its records with the state's producer id and sequences, batches cut by
   a deterministic rule (``sparklog.datasource.producer``), acks=all;
3. writes state ``N`` (create-if-absent), with the sequences advanced.

A task killed in step 2 leaves a prefix of its batches written; its retry (or the replay
after a restart) sends the same batches with the same sequences, and the broker answers the
written ones as duplicates (their original offsets, or DUPLICATE_SEQUENCE_NUMBER for older
ones) without appending them. This needs a deterministic source — the same records in the
same order when Spark replays a batch — as Spark's own exactly-once file sink does;
``format("sparklog")`` and Kafka-like sources are. Records become visible to consumers as
they are written, before Spark commits the batch (unless the writes are transactional).

Transactional writes (option ``kafka.transactional.id``, a prefix): each task writes its
rows of a micro-batch (or of a batch write) in one Kafka transaction of the transactional
id ``<prefix>-<task partition id>``, so ``read_committed`` consumers (sparklog's default,
and a ``format("sparklog")`` read's) see all of them or none. The task's InitProducerId
fences any earlier attempt of the same task and aborts what it left open. In a streaming
query the task's progress commits in the same transaction: the offset ``batch id + 1`` of
partition ``<task>`` of ``__sparklog_sink`` for the group ``<prefix>.sink`` (as Kafka
exactly-once pipelines commit their input offsets); a replayed batch whose progress
committed is skipped, so the query is **exactly once** for read_committed readers whether
or not it has a ``checkpointLocation`` option, and no sink state files are written. Crash
point ``sink.after_commit``: a task committed, Spark has not recorded the batch.

Batch writes (``df.write``), and streams without a ``checkpointLocation`` option (for
example when only ``spark.sql.streaming.checkpointLocation`` is set): **at least once** —
each task attempt is a fresh idempotent producer, so a retried task may write its records
again, as Spark's Kafka sink does.

Sink state, per task, in the query's checkpoint: ``sparklog.datasource.sink_state``.

Crash points (``sparklog.storage.crashpoints``; each has a test that kills the query there
and restarts it): ``sink.after_first_send`` (a task has written some of its batches, no
state saved) and ``sink.after_state`` (a task saved its state; Spark has not committed the
batch).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from sparklog.datasource.options.writes import WriteOptions
from sparklog.datasource.producer import PartitionStream, SinkProducer
from sparklog.datasource.sink_state import SinkState, StateStore
from sparklog.errors import SinkWriteError
from sparklog.kafka.partitioner import murmur2_partition
from sparklog.schemas.codec import AvroEncoding, avro_encoder
from sparklog.storage import crashpoints, names

log = logging.getLogger(__name__)

CRASH_POINTS = crashpoints.register("sink.after_first_send", "sink.after_state")
#: the transactional sink's (``sink.after_first_send`` is hit there too)
TXN_CRASH_POINTS = crashpoints.register("sink.after_first_send", "sink.after_commit")
_BIN = pa.binary()
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


# ---------------------------------------------------------------------------- the task


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: records per ``topic-partition``; ``replayed`` if the batch had
    been written before and nothing was sent."""

    records: dict[str, int]
    replayed: bool = False


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx)


def normalise(
    batch: pa.RecordBatch, topic: str | None, encodings: tuple[AvroEncoding, ...] = ()
) -> pa.Table:
    """A sink batch as columns ``topic, partition, key, value, headers`` of fixed types,
    the typed columns (``encodings``) encoded."""
    n = batch.num_rows
    key = _column(batch, "key")
    value = _column(batch, "value")
    assert value is not None  # checked with the schema
    for enc in encodings:
        encoded = avro_encoder(enc).encode(_column(batch, enc.field))
        key, value = (encoded, value) if enc.field == "key" else (key, encoded)
    headers = _column(batch, "headers")
    part = _column(batch, "partition")
    if topic is not None:
        topics: pa.Array = pa.array([topic] * n, pa.string())
    else:
        col = _column(batch, "topic")
        assert col is not None
        topics = col.cast(pa.string())
        if topics.null_count:
            raise SinkWriteError("a record has a null topic and the option topic is not set")
    return pa.table(
        {
            "topic": topics,
            "partition": pa.nulls(n, pa.int32()) if part is None else part.cast(pa.int32()),
            "key": pa.nulls(n, _BIN) if key is None else key.cast(_BIN),
            "value": value.cast(_BIN),
            "headers": pa.nulls(n, _HEADERS) if headers is None else headers.cast(_HEADERS),
        }
    )


def assign_partitions(table: pa.Table, partitions: int, round_robin_start: int) -> pa.Array:
    """Target partition per row: explicit, else murmur2(key), else round robin."""
    keys = table.column("key").combine_chunks()
    n = len(keys)
    encoded = pc.dictionary_encode(keys)
    by_key = [murmur2_partition(k, partitions) for k in encoded.dictionary.to_pylist()]
    parts = pc.take(pa.array(by_key, pa.int32()), encoded.indices)
    nulls = keys.null_count
    if nulls:
        rr = pa.array([(round_robin_start + i) % partitions for i in range(nulls)], pa.int32())
        parts = pc.replace_with_mask(parts, pc.is_null(keys), rr)
    explicit = table.column("partition").combine_chunks()
    if explicit.null_count < n:
        lo, hi = pc.min_max(explicit).values()
        if lo.as_py() < 0 or hi.as_py() >= partitions:
            bad = lo.as_py() if lo.as_py() < 0 else hi.as_py()
            raise SinkWriteError(f"partition {bad} does not exist ({partitions} partitions)")
        parts = pc.if_else(pc.is_valid(explicit), explicit, parts)
    return parts


def write_task(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], *, task: int, batch_id: int | None
) -> SinkCommit:
    """Write one task's rows (runs in executors); see the module docstring."""
    if opts.transactional_id is not None:
        return _write_transactional(opts, batches, task=task, batch_id=batch_id)
    store = StateStore(opts.state_dir, task) if opts.state_dir and batch_id is not None else None
    state = store.latest() if store else None
    if state is not None and batch_id is not None and state.batch >= batch_id:
        for _ in batches:  # written before this replay: drain the input, send nothing
            pass
        return SinkCommit({}, replayed=True)
    with SinkProducer(opts.client) as producer:
        if store is not None:
            pid, epoch = store.identity(producer.init_producer_id)
        else:
            pid, epoch = producer.init_producer_id()
        seqs = {t: dict(ps) for t, ps in (state.next_sequence if state else {}).items()}

        def stream(topic: str, p: int) -> PartitionStream:
            first = seqs.get(topic, {}).get(p, 0)
            return PartitionStream(topic, p, first, pid, epoch, batch_bytes=opts.batch_bytes)

        streams = _write_streams(producer, opts, batches, task, pid, stream)
    for (topic, p), s in streams.items():
        seqs.setdefault(topic, {})[p] = s.next_sequence
    if store is not None and batch_id is not None:
        store.save(SinkState(batch_id, pid, epoch, seqs))
        crashpoints.hit("sink.after_state")
    return SinkCommit({f"{t}-{p}": s.records for (t, p), s in sorted(streams.items())})


def _write_streams(
    producer: SinkProducer,
    opts: WriteOptions,
    batches: Iterator[pa.RecordBatch],
    task: int,
    pid: int,
    new_stream: Callable[[str, int], PartitionStream],
    before_send: Callable[[list[tuple[str, int]]], None] | None = None,
) -> dict[tuple[str, int], PartitionStream]:
    """Route the task's rows to partition streams (``new_stream`` makes one) and send
    their batches as they fill, then the rest; ``before_send`` learns the partitions of
    each send first (a transaction adds them)."""
    counts: dict[str, int] = {}
    rr: dict[str, int] = {}
    streams: dict[tuple[str, int], PartitionStream] = {}

    def send(final: bool) -> None:
        queues = {k: s.take_batches(final=final) for k, s in streams.items()}
        if before_send is not None:
            before_send([k for k, q in queues.items() if q])
        if producer.send(queues, pid):
            crashpoints.hit("sink.after_first_send")

    for batch in batches:
        if not batch.num_rows:
            continue
        table = normalise(batch, opts.topic, opts.encodings)
        for topic, p, rows in _route(producer, opts, table, task, counts, rr):
            if (topic, p) not in streams:
                streams[(topic, p)] = new_stream(topic, p)
            streams[(topic, p)].add(rows)
        send(final=False)
    send(final=True)
    return streams


def _route(
    producer: SinkProducer,
    opts: WriteOptions,
    table: pa.Table,
    task: int,
    counts: dict[str, int],
    rr: dict[str, int],
) -> Iterator[tuple[str, int, pa.Table]]:
    """``(topic, partition, rows)`` of one normalised input batch (module docstring)."""
    topic_col = table.column("topic")
    for topic in pc.unique(topic_col).to_pylist():
        sub = table if opts.topic else table.filter(pc.equal(topic_col, topic))
        if topic not in counts:
            names.validate_topic_name(topic)
            counts.update(producer.partition_counts([topic]))
            rr[topic] = task
        parts = assign_partitions(sub, counts[topic], rr[topic])
        rr[topic] += sub.column("key").null_count
        for p in pc.unique(parts).to_pylist():
            yield topic, p, sub.filter(pc.equal(parts, p)).select(["key", "value", "headers"])


def _write_transactional(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], *, task: int, batch_id: int | None
) -> SinkCommit:
    """One task's rows in one transaction of ``<kafka.transactional.id>-<task>`` (module
    docstring: transactional writes)."""
    tid = f"{opts.transactional_id}-{task}"
    group = f"{opts.transactional_id}.sink"
    with SinkProducer(opts.client) as producer:
        pid, epoch = producer.begin(tid)  # fences a failed attempt; aborts what it left open
        if batch_id is not None and producer.progress(group, task) > batch_id:
            for _ in batches:  # committed before this replay: drain the input, send nothing
                pass
            return SinkCommit({}, replayed=True)

        def stream(topic: str, p: int) -> PartitionStream:
            return PartitionStream(
                topic, p, 0, pid, epoch, batch_bytes=opts.batch_bytes, transactional=True
            )

        streams = _write_streams(
            producer, opts, batches, task, pid, stream, before_send=producer.add_partitions
        )
        producer.commit(group if batch_id is not None else None, task, (batch_id or 0) + 1)
        crashpoints.hit("sink.after_commit")
    return SinkCommit({f"{t}-{p}": s.records for (t, p), s in sorted(streams.items())})


def _task_context() -> tuple[int, int | None]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return os.getpid(), None
    raw = ctx.getLocalProperty("streaming.sql.batchId")
    return ctx.partitionId(), int(raw) if raw is not None else None


def _summary(messages: list[WriterCommitMessage | None]) -> tuple[int, bool]:
    total, replayed = 0, False
    for m in messages:
        if isinstance(m, SinkCommit):
            total += sum(m.records.values())
            replayed = replayed or m.replayed
    return total, replayed


class SparkLogWriter(DataSourceArrowWriter):
    """``df.write.format("sparklog")``: at least once (see the module docstring)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        task, _ = _task_context()
        return write_task(self.options, iterator, task=task, batch_id=None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total, _ = _summary(messages)
        log.info("sparklog sink: wrote %d records", total)


class SparkLogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sparklog")``: exactly once per batch with a checkpoint."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        task, batch_id = _task_context()
        return write_task(self.options, iterator, task=task, batch_id=batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total, replayed = _summary(messages)
        log.info(
            "sparklog sink: batch %d wrote %d records%s",
            batchId,
            total,
            " (replayed: parts were written before)" if replayed else "",
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # nothing to undo: what was written stays, and a replay of the batch skips it
        log.warning("sparklog sink: batch %d aborted", batchId)
