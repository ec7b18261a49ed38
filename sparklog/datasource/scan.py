"""What one Spark task of a ``format("sparklog")`` read does (runs in executors).

An ``OffsetRange`` (planned by ``sparklog.datasource.plan``) names offsets ``[start, end)``
of one topic partition; ``read_range`` opens the storage root itself, reads those records
up to the high watermark and yields Arrow batches in the Kafka source's columns
(``KAFKA_SCHEMA``, timestamps in microseconds, UTC). Only plain data crosses the Spark
boundary. Offsets removed while the query ran fail the task, or with
``failOnDataLoss=false`` are skipped.

Typed keys and values (``valueFormat``/``keyFormat`` avro or json): the range carries a
``Decoding`` (the reader schemas, chosen on the driver by ``decoding_for``, and where
schemas come from); each batch's key and value are decoded by ``sparklog.schemas.codec``
(every record with its own writer schema, resolved to the reader schema) and the columns
``keySchemaId``/``valueSchemaId`` (and, with ``failOnDecodeError=false``,
``keyDecodeError``/``valueDecodeError``) follow the Kafka columns. A field the driver
planned for the JVM (``TypedField.jvm_writers``) is only unframed here: its column holds
the Avro payloads and a hidden column the schema to decode each with, which the driver's
projection (``sparklog.schemas.spark.jvm_decode``) decodes and drops.

Transactions: control records (markers) are never returned; a ``read_committed`` range
(``kafka.isolation.level``, sparklog's default) was planned to end at the last stable
offset and drops the records of aborted transactions (``LogView.visible``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from sparklog.datasource.options.schemas import SchemaOptions
from sparklog.errors import OffsetOutOfRangeError
from sparklog.schemas.codec import Decoding, decode_batch, resolve_field
from sparklog.schemas.source import open_source
from sparklog.storage import Storage
from sparklog.storage.reader import PartitionReader

log = logging.getLogger(__name__)

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
_TS_US = pa.timestamp("us", tz="UTC")
COALESCE_ROWS = 65_536
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: the stored columns a read needs (the producer id and attributes for transactions)
READ_COLUMNS = [
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "producer_id",
    "attributes",
]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: what one Spark task reads."""

    path: str
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    check_crcs: bool = True
    committed: bool = True
    #: typed keys and values (None: binary, as stored)
    decoding: Decoding | None = None
    #: the manifest version the range was planned on (where finding the latest starts)
    manifest_version: int | None = None


def decoding_for(schemas: SchemaOptions | None, path: str) -> Decoding | None:
    """The reader schemas of a query's typed columns, resolved now (on the driver): a
    version, or the subject's latest at this moment, fixed for the query. A field the
    driver's JVM plan names (``SchemaOptions.jvm_plan``) has the plan's version and is
    framed for the JVM (``TypedField.jvm_writers``)."""
    if schemas is None:
        return None
    source = open_source(schemas.url, path, ssl_cafile=schemas.ca_file)
    plan = schemas.jvm_plan or {}
    fields = []
    for c in schemas.columns:
        planned = plan.get(c.field) if c.format == "avro" else None
        version = planned[0] if planned else c.version
        typed = resolve_field(source, c.field, c.format, c.subject, version)
        if planned:
            typed = dataclasses.replace(typed, jvm_writers=planned[1])
        fields.append(typed)
    return Decoding(source, tuple(fields), schemas.fail_on_decode_error)


def with_decoding(ranges: list[OffsetRange], decoding: Decoding | None) -> list[OffsetRange]:
    """``ranges`` carrying ``decoding`` (the query's typed columns)."""
    if decoding is None:
        return ranges
    return [dataclasses.replace(r, decoding=decoding) for r in ranges]


def kafka_columns(
    batch: pa.RecordBatch, topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """A stored batch in the Kafka source's columns (timestamps in microseconds)."""
    n = batch.num_rows
    arrays = [
        batch.column("key"),
        batch.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        batch.column("offset"),
        batch.column("timestamp").cast(_TS_US),
        batch.column("timestamp_type").cast(pa.int32()),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        arrays.append(batch.column("headers").cast(_HEADERS))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """``read`` of both readers: an ``OffsetRange``'s records (anything else: none, as
    Spark runs one task with a default partition when a plan has no ranges at all)."""
    if not isinstance(partition, OffsetRange):
        return iter(())
    return read_range(partition)


@functools.lru_cache(maxsize=16)
def _storage(path: str) -> Storage:
    """The storage root ``path``, opened once per worker process: a root on an object store
    keeps its client (and its connections) from one task to the next."""
    return Storage(path)


def read_range(partition: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one offset range, in the Kafka source's columns."""
    storage = _storage(partition.path)
    view = PartitionReader(
        storage.fs,
        storage.root,
        partition.topic,
        partition.partition,
        verify_checksums=partition.check_crcs,
        manifest_version=partition.manifest_version,
    ).view(committed=partition.committed)
    start = partition.start
    if start < view.log_start_offset:
        gone = (
            f"{partition.topic}-{partition.partition}: offsets {start}.."
            f"{view.log_start_offset - 1} were removed while the query ran"
        )
        if partition.fail_on_data_loss:
            raise OffsetOutOfRangeError(gone)
        log.warning("%s; reading from %d (failOnDataLoss=false)", gone, view.log_start_offset)
        start = view.log_start_offset
    decoding = partition.decoding
    headers = partition.include_headers or decoding is not None  # ids may be in headers
    columns = READ_COLUMNS + (["headers"] if headers else [])
    visible = (view.visible(b) for b in view.batches(start, partition.end, columns=columns))
    where = f"{partition.topic}-{partition.partition}"
    for batch in coalesce(b for b in visible if b.num_rows):
        out = kafka_columns(batch, partition.topic, partition.partition, partition.include_headers)
        if decoding is not None:
            out = decode_batch(decoding, out, batch.column("headers").cast(_HEADERS), where)
        yield out


def coalesce(
    batches: Iterable[pa.RecordBatch], rows: int = COALESCE_ROWS
) -> Iterator[pa.RecordBatch]:
    """Runs of small batches joined into batches of about ``rows`` rows.

    The active segment holds one frame per produce batch - often a handful of records - and
    every batch handed to Spark pays a fixed cost on both sides of the Python worker, so
    thousands of tiny frames cost far more than their rows. Large batches pass unchanged.
    """
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if not pending and batch.num_rows >= rows:
            yield batch
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.concat_batches(pending)
            pending, count = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
