"""Kafka record batches (magic 2) to Arrow and back: the one codec of the broker (decode on
produce, encode on fetch) and of the Spark sink and the tests (``build_batch``).

Produce: ``decode_batch`` checks a batch's framing, magic and CRC-32C, decompresses its
records with a bounded output buffer (a decompression bomb is refused, not expanded), and
decodes them into an Arrow batch of the storage input columns: with ``sparklog._columns``
(``sparklog/_columns.c``), which writes the records' timestamps, keys and values straight
into Arrow buffers (no Python object per record: 0.02 us a record against 0.9 through
per-record objects), or, for a batch with headers or where the C decoder is not built,
with aiokafka's C-accelerated ``DefaultRecordBatch``. Both accept the same batches (a
differential fuzz test holds them to it); the batch's codec is kept with its records
(``DecodedBatch.codec``, stored in the attributes' codec bits). Fetch: ``encode_batches``
turns stored Arrow batches back into record batches (``sparklog._columns`` or aiokafka's
``DefaultRecordBatchBuilder``), each compressed with the codec its producer used or the
one the topic's ``compression.type`` names, through aiokafka's codec (cramjam) at Kafka's
default levels.
``build_batch`` builds one batch from records given as ``(offset delta, timestamp ms, key,
value, headers)``.
Refusals raise a ``sparklog.errors.BatchError`` subclass, one per Kafka error.

Record batch v2 header (big-endian): baseOffset i64 | batchLength i32 |
partitionLeaderEpoch i32 | magic i8 | crc u32 | attributes i16 | lastOffsetDelta i32 |
baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16 |
baseSequence i32 | recordsCount i32 | records. The CRC covers attributes onwards.
"""

from __future__ import annotations

import importlib
import itertools
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import cramjam
import crc32c
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.codec import gzip_encode, lz4_encode, snappy_encode, zstd_encode
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sparklog.errors import (
    BatchTooLargeError,
    CorruptBatchError,
    InvalidBatchError,
    UnsupportedMagicError,
)
from sparklog.storage.records import DECODED_SCHEMA, HEADERS_TYPE, TIMESTAMP_TYPE, empty_headers

_columns: ModuleType | None
try:  # the compiled decoder (setup.py builds it where a C compiler is)
    _columns = importlib.import_module("sparklog._columns")
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _columns = None

HEADER_SIZE = 61
_HEADER = struct.Struct(">qiiBIhiqqqhii")
_CRC_START = 21
_MAGIC_AT = 16
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
#: ``encode_batches``: serve each stored batch in the codec its producer used
PRODUCER_CODEC = -1
#: ``compression.type`` -> the codec ``encode_batches`` serves
CODECS = {
    "uncompressed": 0,
    "producer": PRODUCER_CODEC,
    "gzip": 1,
    "snappy": 2,
    "lz4": 3,
    "zstd": 4,
}
#: ``(offset delta, timestamp ms, key, value, headers)``: one record for ``build_batch``
Record = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


@dataclass(frozen=True)
class DecodedBatch:
    """One produce batch as Arrow columns (timestamp, key, value, headers) plus its
    idempotence identity (producer id -1: none), which the log stamps on the records, and
    the codec it came compressed with (0: none), which the log keeps with them."""

    records: pa.RecordBatch
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    max_timestamp: int
    timestamp_type: int
    wire_bytes: int
    transactional: bool = False
    codec: int = 0


def split_batches(data: bytes | memoryview) -> list[memoryview]:
    """The record batches of a produce request's ``records`` field."""
    view = memoryview(data)
    out = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < _MAGIC_AT + 1:
            raise CorruptBatchError(f"truncated record batch header at byte {pos}")
        (length,) = struct.unpack_from(">i", view, pos + 8)
        magic = view[pos + _MAGIC_AT]
        if magic != 2:
            raise UnsupportedMagicError(
                f"record batch magic {magic} is not supported (only magic 2, Kafka 0.11+)"
            )
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > len(view):
            raise CorruptBatchError(f"record batch length {length} at byte {pos} is invalid")
        out.append(view[pos:end])
        pos = end
    return out


def _gzip_into(data: memoryview, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=47)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise CorruptBatchError(f"gzip records do not decompress: {e}") from e
    if len(out) > limit:
        raise BatchTooLargeError(f"gzip batch decompresses past {limit} bytes")
    if not d.eof:
        raise CorruptBatchError("gzip data is truncated")
    return out


def _snappy(data: memoryview, limit: int) -> bytes:
    # Kafka's Java client and librdkafka frame snappy the xerial way: a 16-byte header, then
    # (int32 length, raw snappy block) chunks. Otherwise the records are one raw block.
    blocks: list[bytes] = []
    if bytes(data[:8]) == b"\x82SNAPPY\x00":
        pos = 16
        while pos < len(data):
            if pos + 4 > len(data):
                raise CorruptBatchError("truncated xerial snappy chunk")
            (size,) = struct.unpack_from(">i", data, pos)
            if size < 0 or pos + 4 + size > len(data):
                raise CorruptBatchError(f"xerial snappy chunk of {size} bytes at {pos}")
            blocks.append(bytes(data[pos + 4 : pos + 4 + size]))
            pos += 4 + size
    else:
        blocks.append(bytes(data))
    parts, total = [], 0
    try:
        for block in blocks:
            total += int(cramjam.snappy.decompress_raw_len(block))
            if total > limit:
                raise BatchTooLargeError(f"snappy batch decompresses past {limit} bytes")
            parts.append(bytes(cramjam.snappy.decompress_raw(block)))
    except cramjam.DecompressionError as e:
        raise CorruptBatchError(f"snappy records do not decompress: {e}") from e
    return b"".join(parts)


_INTO: dict[int, Callable[[bytes, bytearray], int]] = {
    3: lambda d, o: int(cramjam.lz4.decompress_into(d, o)),
    4: lambda d, o: int(cramjam.zstd.decompress_into(d, o)),
}


def decompress(codec: int, data: memoryview, limit: int) -> bytes:
    """Decompress ``data`` into at most ``limit`` bytes (BatchTooLargeError beyond)."""
    if codec == 1:
        return _gzip_into(data, limit)
    if codec == 2:
        return _snappy(data, limit)
    if codec not in _INTO:
        raise CorruptBatchError(f"unknown compression codec {codec}")
    size = min(limit, max(64 * 1024, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = _INTO[codec](bytes(data), out)
            return bytes(out[:n]) if n < size else bytes(out)
        except (cramjam.DecompressionError, ValueError) as e:
            if "whole buffer" not in str(e) and "too small" not in str(e).lower():
                raise CorruptBatchError(f"records do not decompress: {e}") from e
            if size >= limit:
                raise BatchTooLargeError(
                    f"batch decompresses past {limit} bytes; refused"
                ) from None
            size = min(limit, size * 4)


def _native_columns(
    section: Any, count: int, base_ts: int, ts_type: int, max_ts: int
) -> list[pa.Array] | None:
    """The batch's columns from ``sparklog._columns`` (no Python object per record); None
    when it is not built or a record has headers."""
    if _columns is None:
        return None
    try:
        bufs = _columns.decode_records(section, count, base_ts, ts_type == 1, max_ts)
    except ValueError as e:
        raise CorruptBatchError(f"records do not decode: {e}") from e
    if bufs is None:
        return None
    ts, koff, kdata, kvalid, knulls, voff, vdata, vvalid, vnulls = bufs
    py = pa.py_buffer

    def binary(offsets: bytes, data: bytes, valid: bytes | None, nulls: int) -> pa.Array:
        validity = py(valid) if valid is not None else None
        return pa.Array.from_buffers(pa.binary(), count, [validity, py(offsets), py(data)], nulls)

    return [
        pa.Array.from_buffers(TIMESTAMP_TYPE, count, [None, py(ts)], 0),
        binary(koff, kdata, kvalid, knulls),
        binary(voff, vdata, vvalid, vnulls),
        empty_headers(count),
    ]


def _record_columns(raw: memoryview, attributes: int, section: Any, count: int) -> list[pa.Array]:
    """The batch's columns through aiokafka's record codec, a Python object per record:
    batches with headers, or where ``sparklog._columns`` is not built."""
    if not attributes & CODEC_MASK:
        data = bytes(raw)
    else:
        head = bytearray(raw[:HEADER_SIZE])
        struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(section))
        struct.pack_into(">h", head, _CRC_START, attributes & ~CODEC_MASK)
        body = bytes(head[_CRC_START:]) + section
        struct.pack_into(">I", head, 17, crc32c.crc32c(body))
        data = bytes(head[:_CRC_START]) + body
    try:
        recs = list(DefaultRecordBatch(data))
    except Exception as e:  # aiokafka raises CorruptRecordException and struct errors
        raise CorruptBatchError(f"records do not decode: {e}") from e
    if len(recs) != count:
        raise InvalidBatchError(f"batch says {count} records, holds {len(recs)}")
    if any(r.headers for r in recs):
        headers = pa.array(
            [[{"key": k, "value": v} for k, v in r.headers] for r in recs], HEADERS_TYPE
        )
    else:
        headers = empty_headers(count)
    return [
        pa.array([r.timestamp for r in recs], TIMESTAMP_TYPE),
        pa.array([r.key for r in recs], pa.binary()),
        pa.array([r.value for r in recs], pa.binary()),
        headers,
    ]


def decode_batch(raw: memoryview, *, max_decompressed: int) -> DecodedBatch:
    """Validate and decode one record batch (see the module docstring)."""
    if len(raw) < HEADER_SIZE:
        raise CorruptBatchError(f"record batch of {len(raw)} bytes is shorter than a header")
    (
        _base,
        _length,
        _epoch,
        _magic,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(raw, 0)
    if crc32c.crc32c(raw[_CRC_START:]) != crc:
        raise CorruptBatchError("record batch fails its CRC-32C")
    if attributes & CONTROL_BIT:
        # markers are written by transaction coordinators (WriteTxnMarkers), never produced
        raise InvalidBatchError("a producer may not send control batches")
    transactional = bool(attributes & TRANSACTIONAL_BIT)
    if transactional and producer_id < 0:
        raise InvalidBatchError("a transactional batch needs a producer id")
    if count <= 0 or last_delta != count - 1:
        raise InvalidBatchError(f"batch says {count} records and last delta {last_delta}")
    codec = attributes & CODEC_MASK
    section = decompress(codec, raw[HEADER_SIZE:], max_decompressed) if codec else raw[HEADER_SIZE:]
    ts_type = 1 if attributes & TIMESTAMP_TYPE_BIT else 0
    columns = _native_columns(section, count, base_ts, ts_type, max_ts)
    if columns is None:
        columns = _record_columns(raw, attributes, section, count)
    return DecodedBatch(
        pa.RecordBatch.from_arrays(columns, schema=DECODED_SCHEMA),
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        max_ts,
        ts_type,
        len(raw),
        transactional,
        codec,
    )


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    codec: int = 0,
    log_append_time: bool = False,
    attributes: int = 0,
) -> bytes:
    """One magic-2 record batch of ``records`` (see the module docstring), compressed with
    ``codec``; ``log_append_time`` sets the timestamp-type bit and ``attributes`` the
    transactional and control bits (the CRC covers them)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=2**31 - 1,
    )
    append = builder.append
    for delta, ts, key, value, headers in records:
        append(delta, ts, key, value, headers)
    data = builder.build()
    if base_offset:
        struct.pack_into(">q", data, 0, base_offset)
    extra = (TIMESTAMP_TYPE_BIT if log_append_time else 0) | (
        attributes & (TRANSACTIONAL_BIT | CONTROL_BIT)
    )
    if extra:
        bits = struct.unpack_from(">h", data, _CRC_START)[0] | extra
        struct.pack_into(">h", data, _CRC_START, bits)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[_CRC_START:])))
    return bytes(data)


def _encode_native(
    batch: pa.RecordBatch,
    start: int,
    stop: int,
    *,
    producer: tuple[int, int, int],
    log_append_time: bool,
    flags: int = 0,
) -> bytes:
    """Rows [start, stop) of a stored batch with no headers as one uncompressed record
    batch, its records written by ``sparklog._columns.encode_records``: the bytes
    ``build_batch`` builds for them (aiokafka's layout: partitionLeaderEpoch -1)."""
    assert _columns is not None

    def binary(name: str) -> tuple[Any, Any, Any, int]:
        col = batch.column(name)
        validity, offsets, data = col.buffers()
        return (validity if col.null_count else None), offsets, data, col.offset

    off, ts = batch.column("offset"), batch.column("timestamp")
    records, base_ts, max_ts = _columns.encode_records(
        off.buffers()[1],
        ts.buffers()[1],
        off.offset,
        ts.offset,
        *binary("key"),
        *binary("value"),
        start,
        stop,
    )
    offsets = off.buffers()[1]
    (base_offset,) = struct.unpack_from("<q", offsets, 8 * (off.offset + start))
    (last,) = struct.unpack_from("<q", offsets, 8 * (off.offset + stop - 1))
    pid, epoch, seq = producer
    attributes = (TIMESTAMP_TYPE_BIT if log_append_time else 0) | flags
    tail: bytes = (
        _TAIL.pack(attributes, last - base_offset, base_ts, max_ts, pid, epoch, seq, stop - start)
        + records
    )
    head = _HEAD.pack(base_offset, len(tail) + 9, -1, 2, crc32c.crc32c(tail))
    return head + tail


#: the batch header before the CRC (baseOffset .. crc) and after it (attributes .. count)
_HEAD = struct.Struct(">qiibI")
_TAIL = struct.Struct(">hiqqqhii")
#: aiokafka's codec (cramjam) at the levels Kafka's broker compresses with by default
#: (KIP-390); snappy in xerial framing, as Kafka's Java compression writes it
_COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: lambda d: gzip_encode(d, compresslevel=6),
    2: snappy_encode,
    3: lz4_encode,
    4: zstd_encode,
}


def _compressed(batch: bytes, codec: int) -> bytes:
    """An uncompressed record batch with its records compressed with ``codec``: its
    length, codec bits and CRC rewritten, the rest of its header kept."""
    records = _COMPRESS[codec](batch[HEADER_SIZE:])
    base, _length, epoch, magic, _crc = _HEAD.unpack_from(batch, 0)
    (attributes,) = struct.unpack_from(">h", batch, _CRC_START)
    tail = struct.pack(">h", attributes | codec) + batch[_CRC_START + 2 : HEADER_SIZE] + records
    return _HEAD.pack(base, len(tail) + 9, epoch, magic, crc32c.crc32c(tail)) + tail


def _runs(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` cut where the producer id or the record attributes change: a Kafka record
    batch has one producer and one set of transactional/control bits, which a
    ``read_committed`` consumer reads them by. A sealed row group may hold several
    producers' records; an active segment's batch is one produce batch (one run)."""
    if "attributes" not in batch.schema.names:
        return [batch]
    pids, attrs = batch.column("producer_id"), batch.column("attributes")
    pmin, pmax = pc.min_max(pids).values()
    amin, amax = pc.min_max(attrs).values()
    if pmin == pmax and amin == amax:
        return [batch]
    n = batch.num_rows
    changed = pc.or_(
        pc.not_equal(pids.slice(1), pids.slice(0, n - 1)),
        pc.not_equal(attrs.slice(1), attrs.slice(0, n - 1)),
    )
    cuts = [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
    bounds = [0, *cuts, n]
    return [batch.slice(lo, hi - lo) for lo, hi in itertools.pairwise(bounds)]


def encode_batches(
    batches: Iterable[pa.RecordBatch], *, codec: int = PRODUCER_CODEC, max_records: int = 4096
) -> bytes:
    """Stored Arrow batches as Kafka record batches of at most ``max_records`` records,
    one producer and one set of attribute bits each (``_runs``): their records written by
    ``sparklog._columns`` (no Python object per record) or, with headers, record by record
    through aiokafka's builder, then compressed with ``codec``; ``PRODUCER_CODEC`` (Kafka's
    ``compression.type=producer``) compresses each with the codec its producer used (the
    stored attributes' codec bits; none for records stored before the bits existed).
    Control batches (transaction markers) are never compressed, as Kafka's are not."""
    out = bytearray()
    for batch in (run for b in batches for run in _runs(b)):
        n = batch.num_rows
        if not n:
            continue
        hcol = batch.column("headers")
        has_headers = bool(hcol.offsets[-1].as_py() - hcol.offsets[0].as_py())
        log_append_time = batch.column("timestamp_type")[0].as_py() == 1
        pid = batch.column("producer_id")[0].as_py()
        epoch = batch.column("producer_epoch")[0].as_py()
        seq0 = batch.column("sequence")[0].as_py()
        flags = batch.column("attributes")[0].as_py() if "attributes" in batch.schema.names else 0
        # a marker is served as the log wrote it, uncompressed, whatever the topic's
        # compression.type (as Kafka serves its markers)
        fixed = codec != PRODUCER_CODEC and not flags & CONTROL_BIT
        out_codec = codec if fixed else flags & CODEC_MASK
        flags &= TRANSACTIONAL_BIT | CONTROL_BIT
        if _columns is not None and not has_headers:
            for start in range(0, n, max_records):
                seq = seq0 if start == 0 else -1
                data = _encode_native(
                    batch,
                    start,
                    min(n, start + max_records),
                    producer=(pid, epoch, seq),
                    log_append_time=log_append_time,
                    flags=flags,
                )
                out += _compressed(data, out_codec) if out_codec else data
            continue
        offsets = batch.column("offset").to_pylist()
        ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        headers = (
            [[(h["key"], h["value"]) for h in hs] for hs in hcol.to_pylist()]
            if has_headers
            else None
        )
        for start in range(0, n, max_records):
            stop = min(n, start + max_records)
            base = offsets[start]
            rows = (
                (offsets[i] - base, ts[i], keys[i], values[i], headers[i] if headers else [])
                for i in range(start, stop)
            )
            data = build_batch(
                rows,
                base_offset=base,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq0 if start == 0 else -1,
                log_append_time=log_append_time,
                attributes=flags,
            )
            out += _compressed(data, out_codec) if out_codec else data
    return bytes(out)
