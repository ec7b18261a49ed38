"""Kafka wire framing and message (de)serialisation, built on ``kio``: both sides use it
(the broker parses requests and writes responses; sparklog's client and the tests write
requests and parse responses).

A request frame is ``int32 size | request header | request body``; a response frame is
``int32 size | response header | response body``. Header versions follow the body's
flexibility: flexible requests use request header v2 and response header v1, others v1
and v0 - except ApiVersions, whose response header is always v0 (KIP-511: a client must be
able to read it before it knows the broker's versions).

``ApiKey`` names every API key sparklog speaks. ``encode_request`` / ``decode_response`` are
the client side of a frame, ``parse_request`` / ``encode_response`` the broker side.
``build(cls, value)`` turns plain Python data (dicts, lists, ints, bytes, None) into a kio
entity of class ``cls``, ignoring keys the class does not have. Handlers describe a
response once as plain data and ``build`` fits it to whatever version was asked for.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import io
import struct
import typing
import uuid
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import TZAware, i16, i32, i32Timedelta, i64Timedelta

from sparklog.errors import FrameError

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")


class ApiKey(enum.IntEnum):
    """The Kafka API keys sparklog speaks (Kafka's ``ApiKeys``)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


API_VERSIONS_KEY = ApiKey.API_VERSIONS


@dataclasses.dataclass(frozen=True)
class RequestHead:
    """The fixed start of every request header (readable before the version is known)."""

    api_key: int
    api_version: int
    correlation_id: int


def peek_head(frame: bytes | memoryview) -> RequestHead:
    if len(frame) < _KEY_VERSION.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a header")
    key, version, correlation = _KEY_VERSION.unpack_from(frame, 0)
    return RequestHead(key, version, correlation)


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


_READERS: dict[Any, Any] = {}
_WRITERS: dict[Any, Any] = {}


def _reader(cls: Any) -> Any:
    r = _READERS.get(cls)
    if r is None:
        r = _READERS[cls] = entity_reader(cls)
    return r


def _writer(cls: Any) -> Any:
    w = _WRITERS.get(cls)
    if w is None:
        w = _WRITERS[cls] = entity_writer(cls)
    return w


def parse_request(frame: bytes) -> tuple[Any, Any]:
    """(header, body) of a request frame (without its size prefix)."""
    head = peek_head(frame)
    try:
        cls = request_class(head.api_key, head.api_version)
    except KioIndexError as e:
        raise FrameError(f"no schema for API key {head.api_key} v{head.api_version}") from e
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        header, used = _reader(header_cls)(frame, 0)
        # kio's native reader reserves memory for an array's declared count before reading
        # a single element: refuse counts the frame cannot hold before it sees them.
        _check_counts(cls, frame, used)
        body, _used_body = _reader(cls)(frame, used)
    except FrameError:
        raise
    except Exception as e:  # kio raises several types for truncated or garbled input
        raise FrameError(f"cannot parse {cls.__name__} v{head.api_version}: {e}") from e
    # Trailing bytes are ignored, as Kafka's own broker does: librdkafka, for one, sends
    # Metadata v12 with three bytes after the last field.
    return header, body


_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise FrameError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise FrameError("varint too long")


def _unpack(st: struct.Struct, buf: bytes, pos: int) -> tuple[int, int]:
    if pos + st.size > len(buf):
        raise FrameError("truncated field")
    return st.unpack_from(buf, pos)[0], pos + st.size


def _skip(buf: bytes, pos: int, n: int) -> int:
    if n < 0 or pos + n > len(buf):
        raise FrameError(f"field of {n} bytes runs past the frame")
    return pos + n


def _check_value(t: Any, kafka_type: str | None, flexible: bool, buf: bytes, pos: int) -> int:
    """Walk one value of type ``t`` like kio will, refusing impossible array counts."""
    if typing.get_origin(t) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        (t,) = [a for a in typing.get_args(t) if a is not type(None)]
        if dataclasses.is_dataclass(t):
            marker, pos = _unpack(_I8, buf, pos)
            if marker == -1:
                return pos
    if typing.get_origin(t) is tuple:
        if flexible:
            n, pos = _uvarint(buf, pos)
            n -= 1
        else:
            n, pos = _unpack(_I32, buf, pos)
        if n > len(buf) - pos:
            raise FrameError(f"array of {n} items in {len(buf) - pos} bytes")
        item = typing.get_args(t)[0]
        for _ in range(max(n, 0)):
            pos = _check_value(item, kafka_type, flexible, buf, pos)
        return pos
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        return _check_entity(t, buf, pos)
    if kafka_type in _FIXED:
        return _skip(buf, pos, _FIXED[kafka_type])
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            n, pos = _uvarint(buf, pos)
            return _skip(buf, pos, max(n - 1, 0))
        n, pos = _unpack(_I16 if kafka_type == "string" else _I32, buf, pos)
        return _skip(buf, pos, max(n, 0))
    raise FrameError(f"cannot check a field of type {kafka_type!r}")


def _check_entity(cls: Any, buf: bytes, pos: int) -> int:
    tagged = {}
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            tagged[f.metadata["tag"]] = f
            continue
        t = _hints(cls)[f.name]
        pos = _check_value(t, f.metadata.get("kafka_type"), cls.__flexible__, buf, pos)
    if cls.__flexible__:
        count, pos = _uvarint(buf, pos)
        if count > len(buf) - pos:
            raise FrameError(f"{count} tagged fields in {len(buf) - pos} bytes")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos)
            size, pos = _uvarint(buf, pos)
            tf = tagged.get(tag)
            if tf is not None:
                _check_value(_hints(cls)[tf.name], tf.metadata.get("kafka_type"), True, buf, pos)
            pos = _skip(buf, pos, size)
    return pos


def _check_counts(cls: Any, buf: bytes, pos: int) -> None:
    _check_entity(cls, buf, pos)


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame, size prefix included."""
    header_cls = _response_header_class(api_key, type(body).__flexible__)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, header_cls(correlation_id=i32(correlation_id)))
    _writer(type(body))(buf, body)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def _response_header_class(api_key: int, flexible_body: bool) -> Any:
    return ResponseHeaderV1 if flexible_body and api_key != API_VERSIONS_KEY else ResponseHeaderV0


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    body: Any,
    *,
    client_id: str | None = "sparklog",
) -> bytes:
    """A whole request frame, size prefix included. ``body`` is a kio request entity or
    plain data for ``build``; the header is v2 for flexible versions, v1 otherwise."""
    cls = request_class(api_key, version)
    if not isinstance(body, cls):
        body = build(cls, body)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, header)
    _writer(cls)(buf, body)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a response frame without its size prefix."""
    cls = response_class(api_key, version)
    header, used = _reader(_response_header_class(api_key, cls.__flexible__))(frame, 0)
    body, _ = _reader(cls)(frame, used)
    return int(header.correlation_id), body


# ---------------------------------------------------------------------------- build


_HINTS: dict[Any, dict[str, Any]] = {}


def _hints(cls: Any) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _HINTS[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return found


def _convert(t: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(t)
    if origin is typing.Union or origin is getattr(__import__("types"), "UnionType", None):
        inner = [a for a in typing.get_args(t) if a is not type(None)]
        return _convert(inner[0], value)
    if origin is tuple:
        (item_t, *_rest) = typing.get_args(t)
        return tuple(_convert(item_t, v) for v in value)
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        return value if isinstance(value, t) else build(t, value)
    if t is ErrorCode:
        return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
    if t in (i32Timedelta, i64Timedelta):
        if isinstance(value, datetime.timedelta):
            return value
        return datetime.timedelta(milliseconds=int(value))
    if t is TZAware:
        if isinstance(value, datetime.datetime):
            return value
        return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)
    if t is uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    return value


def build(cls: type[Any], value: dict[str, Any]) -> Any:
    """An instance of the kio entity ``cls`` from plain data (see the module docstring)."""
    kwargs = {}
    for name, t in _hints(cls).items():
        if name in value:
            v = value[name]
            # fields nullable in newer versions are plain strings in older ones
            kwargs[name] = "" if v is None and t is str else _convert(t, v)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__}: {e}") from e
