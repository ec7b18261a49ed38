"""Confluent's framing of keys and values, found with Arrow compute functions.

A value is either ``0x00`` + the schema id (4 bytes, big-endian) + the payload, or
``0x01`` + the schema's GUID (16 bytes) + the payload, or the bare payload with the GUID
in the header ``__value_schema_id`` (``__key_schema_id`` for keys) as ``0x01`` + 16
bytes (confluent-kafka's ``header_schema_id_serializer``). As confluent-kafka's
``dual_schema_id_deserializer`` does, a header wins over a prefix. ``frames`` finds every
row's schema and payload without Python per row, and groups rows by schema; the codec
(``sparklog.schemas.codec``) decodes them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.schemas.model import MAGIC

MAGIC_GUID = 1
_ID_PREFIX = 5
_GUID_PREFIX = 17
_BIN4 = pa.binary(4)
#: ``binary_slice`` without a stop fails on values shorter than its start (pyarrow 26)
_END = 2**31 - 1


@dataclass
class Frames:
    """A column's framing: ``refs`` are the schemas seen (``("id", 42)`` or ``("guid",
    "...")``), ``which`` the index into ``refs`` per row (null: a null value, or an
    error), ``payload`` the values without their prefix, ``errors`` why rows are unframed."""

    refs: list[tuple[str, Any]]
    which: pa.Array
    payload: pa.Array
    errors: dict[int, str]


def _uint32_be(four: pa.Array) -> pa.Array:
    """4-byte binary values (no nulls) as big-endian unsigned ints, vectorised."""
    fixed = four.cast(_BIN4)
    buf = fixed.buffers()[1]
    le = pa.Array.from_buffers(pa.uint32(), len(fixed), [None, buf], offset=fixed.offset)
    b = pc.bit_wise_and
    shl, shr, orr = pc.shift_left, pc.shift_right, pc.bit_wise_or
    ff, ff00 = pa.scalar(0xFF, pa.uint32()), pa.scalar(0xFF00, pa.uint32())
    s8, s24 = pa.scalar(8, pa.uint32()), pa.scalar(24, pa.uint32())
    return orr(
        orr(shl(b(le, ff), s24), shl(b(le, ff00), s8)), orr(b(shr(le, s8), ff00), shr(le, s24))
    )


def _header_values(headers: pa.Array | None, name: str, n: int) -> pa.Array | None:
    """Per row, the value of the first header ``name`` (null where it has none)."""
    if (
        headers is None
        or not len(headers)
        or pc.sum(pc.list_value_length(headers)).as_py()
        in (
            None,
            0,
        )
    ):
        return None
    flat = pc.list_flatten(headers)
    parents = pc.list_parent_indices(headers)
    match = pc.fill_null(pc.equal(pc.struct_field(flat, "key"), pa.scalar(name)), False)
    if not pc.any(match).as_py():
        return None
    rows = parents.filter(match)
    values = pc.struct_field(flat, "value").filter(match)
    at = pc.index_in(pa.array(range(n), pa.int64()), value_set=rows)
    return pc.take(values, at)


def frames(values: pa.Array, headers: pa.Array | None, header: str) -> Frames:
    """The framing of ``values`` (binary), see the module docstring."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = values.cast(pa.binary())
    n = len(values)
    valid = pc.is_valid(values)
    length = pc.fill_null(pc.binary_length(values), 0)
    first = pc.binary_slice(values, 0, 1)
    by_id = pc.fill_null(
        pc.and_(pc.equal(first, pa.scalar(bytes([MAGIC]))), pc.greater_equal(length, _ID_PREFIX)),
        False,
    )
    by_guid = pc.fill_null(
        pc.and_(
            pc.equal(first, pa.scalar(bytes([MAGIC_GUID]))), pc.greater_equal(length, _GUID_PREFIX)
        ),
        False,
    )
    guid_bytes = pc.if_else(by_guid, pc.binary_slice(values, 1, _GUID_PREFIX), None)
    payload = pc.if_else(
        by_id,
        pc.binary_slice(values, _ID_PREFIX, _END),
        pc.if_else(by_guid, pc.binary_slice(values, _GUID_PREFIX, _END), values),
    )
    hv = _header_values(headers, header, n)
    in_header = pa.repeat(False, n) if hv is None else pc.fill_null(pc.is_valid(hv), False)
    header_ok = pa.repeat(False, n)
    if hv is not None:  # a header wins over a prefix (confluent-kafka's deserializer)
        hlen = pc.fill_null(pc.binary_length(hv), 0)
        header_ok = pc.fill_null(
            pc.and_(
                pc.equal(pc.binary_slice(hv, 0, 1), pa.scalar(bytes([MAGIC_GUID]))),
                pc.equal(hlen, _GUID_PREFIX),
            ),
            False,
        )
        header_ok = pc.and_(header_ok, valid)
        guid_bytes = pc.if_else(header_ok, pc.binary_slice(hv, 1, _GUID_PREFIX), guid_bytes)
        payload = pc.if_else(header_ok, values, payload)
        by_id = pc.and_(by_id, pc.invert(in_header))
        by_guid = pc.or_(pc.and_(by_guid, pc.invert(in_header)), header_ok)
    raw = pc.fill_null(
        pc.if_else(by_id, pc.binary_slice(values, 1, _ID_PREFIX), None), pa.scalar(b"\0\0\0\0")
    )
    ids = pc.if_else(by_id, _uint32_be(raw).cast(pa.int64()), None)
    refs: list[tuple[str, Any]] = []
    which = pa.nulls(n, pa.int32())
    if pc.any(by_id).as_py():
        unique_ids = pc.unique(ids.filter(by_id))
        refs += [("id", i) for i in unique_ids.to_pylist()]
        which = pc.if_else(by_id, pc.index_in(ids, value_set=unique_ids).cast(pa.int32()), which)
    if pc.any(by_guid).as_py():
        unique_guids = pc.unique(guid_bytes.filter(by_guid))
        base = pa.scalar(len(refs), pa.int32())
        refs += [("guid", str(uuid.UUID(bytes=g))) for g in unique_guids.to_pylist()]
        at = pc.add(pc.index_in(guid_bytes, value_set=unique_guids).cast(pa.int32()), base)
        which = pc.if_else(by_guid, at, which)
    errors: dict[int, str] = {}
    bad = pc.and_(valid, pc.invert(pc.or_(by_id, by_guid)))
    if pc.any(bad).as_py():
        for i in pc.indices_nonzero(bad).to_pylist():
            errors[i] = _framing_error(
                values[i].as_py(), None if hv is None else hv[i].as_py(), header
            )
    return Frames(refs, which, payload, errors)


def _framing_error(value: bytes, header_value: bytes | None, header: str) -> str:
    if header_value is not None:
        return (
            f"header {header} is not magic byte 1 + a 16-byte schema GUID "
            f"({len(header_value)} bytes)"
        )
    if not value:
        return "an empty value has no schema id"
    if value[0] not in (MAGIC, MAGIC_GUID):
        return f"unknown magic byte {value[0]} (expected 0 and a schema id) and no {header} header"
    return f"truncated: {len(value)} bytes cannot hold a schema id"
