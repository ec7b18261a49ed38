"""The record schema every segment stores, and building record batches for ``append``.

Row schema (Arrow), identical in active (Arrow IPC) and sealed (Parquet) segments::

    offset          int64 not null        assigned by the log, dense per append
    timestamp       timestamp[ms, UTC] not null
    timestamp_type  int8 not null         0 = CreateTime, 1 = LogAppendTime (Kafka's codes)
    key             binary                null = no key
    value           binary                null = tombstone
    headers         list<struct<key: string not null, value: binary>> not null
    producer_id     int64 not null        -1 when not idempotent
    producer_epoch  int16 not null        -1 when not idempotent
    sequence        int32 not null        the record's sequence number, -1 when none
    attributes      int8 not null         Kafka's batch attribute bits that describe a
                                          record: 0x07 the codec of its produced batch,
                                          0x10 transactional, 0x20 control

``append`` takes a batch with any subset of the columns other than ``offset``, the
producer columns and ``attributes`` (missing ones get defaults); the log adds the offsets,
and stamps the producer columns (and the transactional bit) from the batch's idempotence
identity (``ProducerBatch``) when it has one: the producer state, with its transactions, is
rebuilt from exactly these columns (``sparklog.storage.producers``).

The **codec bits** (``attributes & 0x07``, Kafka's codes: 0 none, 1 gzip, 2 snappy, 3 lz4,
4 zstd) record how the producer compressed the batch the record came in (``append``'s
``codec``; the records themselves are always stored uncompressed), so that Fetch can serve
it in that codec again, as Kafka does with ``compression.type=producer``. Every record of
a produced batch carries the same bits, so batch boundaries keep them (a sealed row group
stores such a constant run in a few bytes). Records written before the bits existed have
0: uncompressed.

A **control record** (``control_record``) is a transaction marker, as in Kafka: attributes
0x30, the producer's id and epoch, sequence -1, key ``version i16 (=0) | type i16`` (0
abort, 1 commit) and value ``version i16 (=0) | coordinator epoch i32``, big-endian. Control
records hold offsets like any record but are never shown to a consumer.

The bits and the control key and value layouts are ``sparklog.storage.control``'s. Segments
written before ``attributes`` existed (active format 1, and Parquet files without the
column) are read as if every record had attributes 0 (``with_attributes``).
"""

from __future__ import annotations

import functools
import importlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import InvalidRecordsError
from sparklog.storage.control import (
    CODEC_MASK,
    CONTROL,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    TRANSACTIONAL,
    control_key,
    control_value,
)
from sparklog.storage.producers import SEQ_MOD, ProducerBatch

_columns: ModuleType | None
try:  # the compiled helpers (``sparklog/_columns.c``); optional, as the decoder's are
    _columns = importlib.import_module("sparklog._columns")
except ImportError:
    _columns = None
if not hasattr(_columns, "max_int64"):  # built before the helpers: left to pyarrow
    _columns = None
_INT64 = pa.int64()
_INT32 = pa.int32()

CREATE_TIME = 0
LOG_APPEND_TIME = 1

HEADER_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")

RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE, nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int16(), nullable=False),
        pa.field("sequence", pa.int32(), nullable=False),
        pa.field("attributes", pa.int8(), nullable=False),
    ]
)
#: the schema of segments written before ``attributes`` (active segment format 1)
SCHEMA_V1 = pa.schema(list(RECORD_SCHEMA)[:-1])
PRODUCER_COLUMNS = ("producer_id", "producer_epoch", "sequence")
INPUT_COLUMNS = tuple(
    f.name
    for f in RECORD_SCHEMA
    if f.name not in ("offset", "attributes") and f.name not in PRODUCER_COLUMNS
)

_DEFAULTS: dict[str, int] = {
    "timestamp_type": CREATE_TIME,
    "producer_id": -1,
    "producer_epoch": -1,
    "sequence": -1,
    "attributes": 0,
}

Header = tuple[str, bytes | None]


def make_records(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[Sequence[Header]] | None = None,
) -> pa.RecordBatch:
    """A batch for ``append`` from Python lists (tests, tools; not a hot path)."""
    n = len(values)
    columns: dict[str, pa.Array] = {"value": pa.array(values, pa.binary())}
    if keys is not None:
        columns["key"] = pa.array(keys, pa.binary())
    if timestamps is not None:
        columns["timestamp"] = pa.array(timestamps, pa.int64()).cast(TIMESTAMP_TYPE)
    if headers is not None:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v} for k, v in hs] for hs in headers], HEADERS_TYPE
        )
    for name, col in columns.items():
        if len(col) != n:
            raise InvalidRecordsError(f"column {name!r} has {len(col)} rows, values has {n}")
    return pa.RecordBatch.from_pydict(columns)


@functools.lru_cache(maxsize=256)
def _constant(value: int, type_: pa.DataType, n: int) -> pa.Array:
    """An array of ``n`` copies of ``value``. Arrow arrays are immutable, so producers with
    steady batch sizes share one per column instead of building it on every append."""
    return pa.repeat(pa.scalar(value, type_), n)


@functools.lru_cache(maxsize=64)
def _arange(n: int) -> pa.Array:
    return pc.cumulative_sum(_constant(1, pa.int64(), n))


@functools.lru_cache(maxsize=64)
def empty_headers(n: int) -> pa.Array:
    """``n`` empty header lists, built without a Python loop (and cached: immutable)."""
    offsets = _constant(0, pa.int32(), n + 1)
    return pa.ListArray.from_arrays(offsets, pa.array([], HEADER_TYPE), type=HEADERS_TYPE)


def offsets_array(base_offset: int, n: int) -> pa.Array:
    """Dense offsets ``base_offset .. base_offset + n - 1``."""
    if _columns is not None:
        return pa.Array.from_buffers(
            _INT64, n, [None, pa.py_buffer(_columns.arange(base_offset, n))]
        )
    return pc.add(_arange(n), pa.scalar(base_offset - 1, pa.int64()))


def sequences_array(base_sequence: int, n: int) -> pa.Array:
    """A producer's sequences ``base_sequence ..`` for ``n`` records, wrapping at 2^31."""
    if _columns is not None:
        return pa.Array.from_buffers(
            _INT32, n, [None, pa.py_buffer(_columns.arange(base_sequence, n, 4))]
        )
    seqs = pc.add(_arange(n), pa.scalar(base_sequence - 1, pa.int64()))
    if base_sequence + n > SEQ_MOD:
        seqs = pc.bit_wise_and(seqs, pa.scalar(SEQ_MOD - 1, pa.int64()))
    return seqs.cast(pa.int32())


def normalize(
    batch: pa.RecordBatch | pa.Table,
    *,
    base_offset: int,
    now_ms: int,
    log_append_time: bool,
    producer: ProducerBatch | None = None,
    codec: int = 0,
) -> pa.RecordBatch:
    """Check ``batch`` against the input columns and return a full ``RECORD_SCHEMA`` batch.

    Offsets are ``base_offset`` onwards; timestamps default to ``now_ms`` (and are
    overwritten with it, type LogAppendTime, when the topic says so); the producer columns
    are ``producer``'s (-1 without one); ``codec`` (Kafka's code of the codec the batch was
    produced with) goes to the attributes' codec bits.
    """
    if codec & ~CODEC_MASK:
        raise ValueError(f"codec {codec} is not a Kafka compression codec (0-{CODEC_MASK})")
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        if batch is None:
            raise InvalidRecordsError("cannot append an empty batch")
    if not isinstance(batch, pa.RecordBatch):
        raise InvalidRecordsError(f"expected a pyarrow RecordBatch or Table, got {type(batch)}")
    n = batch.num_rows
    if n == 0:
        raise InvalidRecordsError("cannot append an empty batch")
    if batch.schema.equals(DECODED_SCHEMA) and not log_append_time:
        return _normalize_decoded(batch, n, base_offset, producer, codec)
    names = batch.schema.names
    unknown = [c for c in names if c not in INPUT_COLUMNS]
    if unknown:
        raise InvalidRecordsError(
            f"unknown columns {unknown}; append accepts {list(INPUT_COLUMNS)}"
        )
    arrays: list[pa.Array] = []
    for field in RECORD_SCHEMA:
        name = field.name
        if name == "offset":
            arrays.append(offsets_array(base_offset, n))
            continue
        if name == "timestamp" and log_append_time:
            arrays.append(pa.repeat(pa.scalar(now_ms, TIMESTAMP_TYPE), n))
            continue
        if name == "timestamp_type" and log_append_time:
            arrays.append(_constant(LOG_APPEND_TIME, pa.int8(), n))
            continue
        if name == "attributes":
            bits = codec | (TRANSACTIONAL if producer is not None and producer.transactional else 0)
            arrays.append(_constant(bits, pa.int8(), n))
            continue
        if producer is not None and name in PRODUCER_COLUMNS:
            if name == "sequence" and producer.base_sequence < 0:
                arrays.append(_constant(-1, pa.int32(), n))
            elif name == "sequence":
                arrays.append(sequences_array(producer.base_sequence, n))
            else:
                value = producer.producer_id if name == "producer_id" else producer.producer_epoch
                arrays.append(_constant(value, field.type, n))
            continue
        if name in names:
            col = batch.column(name)
            if col.type != field.type:
                try:
                    col = col.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise InvalidRecordsError(
                        f"column {name!r} has type {col.type}, expected {field.type}"
                    ) from e
            if not field.nullable and col.null_count:
                raise InvalidRecordsError(f"column {name!r} has nulls; it cannot")
            arrays.append(col)
        elif name == "timestamp":
            arrays.append(pa.repeat(pa.scalar(now_ms, TIMESTAMP_TYPE), n))
        elif name == "key" or name == "value":
            arrays.append(pa.nulls(n, pa.binary()))
        elif name == "headers":
            arrays.append(empty_headers(n))
        else:
            arrays.append(_constant(_DEFAULTS[name], field.type, n))
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


#: what the broker's Kafka decoder builds (``sparklog.kafka.records``): the columns a
#: produce batch carries, of their stored types
DECODED_SCHEMA = pa.schema(
    [RECORD_SCHEMA.field(c) for c in ("timestamp", "key", "value", "headers")]
)


def _normalize_decoded(
    batch: pa.RecordBatch, n: int, base_offset: int, producer: ProducerBatch | None, codec: int
) -> pa.RecordBatch:
    """``normalize`` of a produce batch as the broker decoded it, CreateTime: the same
    columns built without looking at each field (a produce request's per-batch cost)."""
    for i, name in ((0, "timestamp"), (3, "headers")):  # never from the decoder
        if batch.column(i).null_count:
            raise InvalidRecordsError(f"column {name!r} has nulls; it cannot")
    if producer is None:
        pid, epoch, seqs = _constant(-1, pa.int64(), n), _constant(-1, pa.int16(), n), None
        bits = codec
    else:
        pid = _constant(producer.producer_id, pa.int64(), n)
        epoch = _constant(producer.producer_epoch, pa.int16(), n)
        seq0 = producer.base_sequence
        seqs = sequences_array(seq0, n) if seq0 >= 0 else None
        bits = codec | (TRANSACTIONAL if producer.transactional else 0)
    return pa.RecordBatch.from_arrays(
        [
            offsets_array(base_offset, n),
            batch.column(0),
            _constant(CREATE_TIME, pa.int8(), n),
            batch.column(1),
            batch.column(2),
            batch.column(3),
            pid,
            epoch,
            _constant(-1, pa.int32(), n) if seqs is None else seqs,
            _constant(bits, pa.int8(), n),
        ],
        schema=RECORD_SCHEMA,
    )


def with_attributes(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with an ``attributes`` column of zeros if it has none (a segment written
    before the column existed); unchanged otherwise."""
    if "attributes" in batch.schema.names:
        return batch
    return batch.append_column(
        pa.field("attributes", pa.int8(), nullable=False),
        _constant(0, pa.int8(), batch.num_rows),
    )


def control_record(commit: bool, coordinator_epoch: int) -> pa.RecordBatch:
    """The input batch of one transaction marker (see the module docstring); the log adds
    the producer columns and the control bits (``PartitionLog.append_marker``)."""
    key = control_key(CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = control_value(coordinator_epoch)
    return pa.RecordBatch.from_pydict(
        {"key": pa.array([key], pa.binary()), "value": pa.array([value], pa.binary())}
    )


def marker_batch(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    base_offset: int,
    now_ms: int,
    log_append_time: bool,
) -> pa.RecordBatch:
    """The stored batch of one transaction marker at ``base_offset``: ``control_record``
    normalized with the producer's columns, its attributes the control and transactional
    bits."""
    producer = ProducerBatch(producer_id, producer_epoch, -1, 1, transactional=True)
    batch = normalize(
        control_record(commit, coordinator_epoch),
        base_offset=base_offset,
        now_ms=now_ms,
        log_append_time=log_append_time,
        producer=producer,
    )
    return batch.set_column(
        batch.schema.get_field_index("attributes"),
        batch.schema.field("attributes"),
        pa.array([CONTROL | TRANSACTIONAL], pa.int8()),
    )


def _data_bytes(col: pa.Array) -> int:
    """Bytes of a binary or string array's values: the difference of its first and last
    offsets (a null's offsets are equal), read from the offsets buffer - a per-batch cost
    that does not grow with the batch, where a compute kernel costs ~10 us per call."""
    n = len(col)
    if n == 0:
        return 0
    offsets = col.buffers()[1]
    if offsets is None:
        return 0
    fmt = "<q" if pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type) else "<i"
    width = struct.calcsize(fmt)
    (lo,) = struct.unpack_from(fmt, offsets, width * col.offset)
    (hi,) = struct.unpack_from(fmt, offsets, width * (col.offset + n))
    return int(hi - lo)


def payload_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of keys, values and header keys and values: what ``max.message.bytes`` limits
    (data only; Arrow's offsets and validity bitmaps are not the producer's bytes)."""
    data = _data_bytes(batch.column("key")) + _data_bytes(batch.column("value"))
    lists = batch.column("headers")
    if not len(lists) or lists.offsets[0] == lists.offsets[-1]:  # no headers at all
        return data
    headers = lists.flatten()
    return data + _data_bytes(headers.field("key")) + _data_bytes(headers.field("value"))


def max_timestamp(batch: pa.RecordBatch) -> int:
    col = batch.column("timestamp")
    if _columns is not None and not col.null_count and len(col):
        return int(_columns.max_int64(col.buffers()[1], col.offset, len(col)))
    ts = pc.max(col)
    return int(ts.value) if ts.is_valid else -1


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed. ``duplicate``: an idempotent producer's retry of a batch the
    log holds, nothing written, offsets the original's. ``rolled``: this append rolled the
    active segment first."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int = -1
    duplicate: bool = False
    rolled: bool = False
