"""The codec: framing, Avro and JSON decoding into Spark's Arrow types, Avro encoding.

Schemas live in a real storage root's ``_schemas`` topic, written with the registry's own
records (``RegistryState``), and are read back by ``StorageSchemaSource``; payloads are
written by fastavro, an independent Avro implementation, framed as confluent-kafka frames
them.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import io
import json
import pickle
import struct
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from sparklog.errors import OptionError, SchemaDecodeError
from sparklog.schemas import codec, types
from sparklog.schemas.model import Reference
from sparklog.schemas.source import StorageSchemaSource, open_source
from tests.support.schemas import ALL_TYPES, V1, V2, SchemasTopic, avro


@pytest.fixture
def registry(tmp_path: Path) -> SchemasTopic:
    return SchemasTopic(str(tmp_path / "data"))


@pytest.fixture
def source(registry: SchemasTopic) -> StorageSchemaSource:
    return StorageSchemaSource(str(registry.storage.root))


def decode(
    source: Any, subject: str, values: list[bytes | None], *, fmt: str = "avro",
    headers: list[list[tuple[str, bytes]]] | None = None, fail: bool = True,
) -> pa.RecordBatch:  # fmt: skip
    typed = codec.resolve_field(source, "value", fmt, subject, None)
    n = len(values)
    batch = pa.RecordBatch.from_pydict(
        {"value": pa.array(values, pa.binary()), "offset": pa.array(range(n), pa.int64())}
    )
    h = None
    if headers is not None:
        h = pa.array(
            [[{"key": k, "value": v} for k, v in hs] for hs in headers],
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        )
    decoding = codec.Decoding(source, (typed,), fail_on_error=fail)
    return codec.decode_batch(decoding, batch, h, "orders-0")


def test_each_record_is_resolved_from_its_writer_schema(
    registry: SchemasTopic, source: Any
) -> None:
    v1 = registry.register("orders-value", V1)
    v2 = registry.register("orders-value", V2)
    out = decode(source, "orders-value", [
        avro(V1, {"id": 1, "item": "tea"}, v1),
        None,
        avro(V2, {"id": 2, "item": "cake", "qty": 3, "note": "hot"}, v2),
    ])  # fmt: skip
    assert out.column("value").to_pylist() == [
        {"id": 1, "item": "tea", "qty": 1, "note": None},
        None,
        {"id": 2, "item": "cake", "qty": 3, "note": "hot"},
    ]
    assert out.column("valueSchemaId").to_pylist() == [v1, None, v2]
    # the schema's own nullability (Spark's from_avro in FAILFAST mode)...
    required = pa.struct([
        pa.field("id", pa.int64(), nullable=False), pa.field("item", pa.string(), nullable=False),
        pa.field("qty", pa.int32(), nullable=False), pa.field("note", pa.string()),
    ])  # fmt: skip
    typed = codec.resolve_field(source, "value", "avro", "orders-value", None)
    assert typed.node().type == required
    # ... and the column's: nullable throughout, as Spark's PERMISSIVE from_avro gives it
    assert out.schema.field("value").type == types.nullable(required)
    assert all(f.nullable for f in out.schema.field("value").type)


def test_an_older_reader_drops_fields_a_newer_writer_added(
    registry: SchemasTopic, source: Any
) -> None:
    v1 = registry.register("orders-value", V1)
    v2 = registry.register("orders-value", V2)
    typed = codec.resolve_field(source, "value", "avro", "orders-value", 1)
    assert typed.reader.id == v1
    d = codec.FieldDecoder(typed, source).decode(
        pa.array([avro(V2, {"id": 2, "item": "x", "qty": 3, "note": None}, v2)]), None
    )
    assert d.values.to_pylist() == [{"id": 2, "item": "x"}] and not d.errors


def test_the_guid_in_a_header_names_the_schema(registry: SchemasTopic, source: Any) -> None:
    sid = registry.register("orders-value", V1)
    header = [("__value_schema_id", b"\x01" + uuid.UUID(registry.guid(sid)).bytes)]
    out = decode(source, "orders-value",
                 [avro(V1, {"id": 7, "item": "jam"}, None)], headers=[header])  # fmt: skip
    assert out.column("value").to_pylist() == [{"id": 7, "item": "jam"}]
    assert out.column("valueSchemaId").to_pylist() == [sid]


def test_a_corrupt_frame_fails_naming_topic_partition_and_offset(
    registry: SchemasTopic, source: Any
) -> None:
    sid = registry.register("orders-value", V1)
    good = avro(V1, {"id": 1, "item": "tea"}, sid)
    with pytest.raises(SchemaDecodeError, match=r"orders-0 offset 1: .*unknown magic byte 7"):
        decode(source, "orders-value", [good, b"\x07abc"])
    with pytest.raises(SchemaDecodeError, match=r"orders-0 offset 0: .*schema id 99 is not"):
        decode(source, "orders-value", [struct.pack(">bI", 0, 99) + good[5:]])
    with pytest.raises(SchemaDecodeError, match=r"orders-0 offset 2: .*schema id \d+: "):
        decode(source, "orders-value", [good, good, good[:7]])


def test_without_fail_on_error_bad_records_are_null_with_the_reason(
    registry: SchemasTopic, source: Any
) -> None:
    sid = registry.register("orders-value", V1)
    good = avro(V1, {"id": 1, "item": "tea"}, sid)
    out = decode(source, "orders-value", [good, b"\x00\x00", good[:7], None], fail=False)
    assert out.column("value").to_pylist() == [{"id": 1, "item": "tea"}, None, None, None]
    errors = out.column("valueDecodeError").to_pylist()
    assert errors[0] is None and errors[3] is None
    assert "truncated" in errors[1] and f"schema id {sid}" in errors[2]


def test_avro_types_map_to_sparks(registry: SchemasTopic, source: Any) -> None:
    sid = registry.register("all-value", ALL_TYPES)
    t = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.UTC)
    record = {
        "b": True, "f": 1.5, "d": 2.5, "by": b"\x01", "fx": b"ab", "e": "B", "u": {"x": 4},
        "il": 2**40, "arr": ["a", None], "m": {"k": 1}, "dt": datetime.date(2024, 5, 6),
        "tsm": t, "tsu": t, "dec": decimal.Decimal("12.34"), "tm": 1000,
        "uid": "9b2f4cde-52c2-4e55-b6a6-1d0a7e0a5b44", "rec": {"x": 5},
    }  # fmt: skip
    second = {**record, "u": "s", "il": 3, "rec": None}
    out = decode(source, "all-value", [avro(ALL_TYPES, r, sid) for r in (record, second)])
    got = out.column("value").to_pylist()
    assert got[0] == {**record, "u": {"member0": None, "member1": None, "member2": {"x": 4}},
                      "m": [("k", 1)]}  # fmt: skip
    assert got[1]["u"] == {"member0": None, "member1": "s", "member2": None}
    assert (got[1]["il"], got[1]["rec"]) == (3, None)
    value_type = out.schema.field("value").type
    assert value_type.field("tsm").type == pa.timestamp("us", tz="UTC")
    assert value_type.field("dec").type == pa.decimal128(9, 2)
    assert value_type.field("tm").type == pa.int32()
    assert value_type.field("arr").type == pa.list_(pa.field("element", pa.string()))


def test_named_types_from_references_resolve(registry: SchemasTopic, source: Any) -> None:
    address = {"type": "record", "name": "Address", "namespace": "geo",
               "fields": [{"name": "city", "type": "string"}]}  # fmt: skip
    registry.register("address", address)
    person = {"type": "record", "name": "Person", "fields": [
        {"name": "home", "type": "geo.Address"}, {"name": "work", "type": ["null", "geo.Address"]},
    ]}  # fmt: skip
    sid = registry.register("people-value", person, refs=[Reference("geo.Address", "address", 1)])
    full = {**person, "fields": [{"name": "home", "type": address}, person["fields"][1]]}
    rec = {"home": {"city": "Oslo"}, "work": {"city": "Rome"}}
    out = decode(source, "people-value", [avro(full, rec, sid)])
    assert out.column("value").to_pylist() == [rec]


def test_json_values_parse_into_the_reader_schemas_type(
    registry: SchemasTopic, source: Any
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"}, "price": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "at": {"type": "string", "format": "date-time"},
            "who": {"type": "object", "properties": {"name": {"type": ["string", "null"]}}},
        },
    }  # fmt: skip
    sid = registry.register("orders-value", schema, "JSON")
    prefix = struct.pack(">bI", 0, sid)
    docs = [
        {"id": 1, "price": 2, "tags": ["a"], "at": "2024-01-02T03:04:05Z", "who": {"name": "x"}},
        {"id": 2, "extra": True},
    ]
    out = decode(source, "orders-value",
                 [prefix + json.dumps(d, indent=1).encode() for d in docs], fmt="json")  # fmt: skip
    assert out.column("value").to_pylist() == [
        {"id": 1, "price": 2.0, "tags": ["a"], "who": {"name": "x"},
         "at": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)},
        {"id": 2, "price": None, "tags": None, "at": None, "who": None},
    ]  # fmt: skip
    with pytest.raises(SchemaDecodeError, match="offset 1: .*not a JSON document"):
        decode(source, "orders-value", [prefix + b'{"id": 1}', prefix + b"{oops"], fmt="json")


def test_untyped_json_is_kept_as_json_text_and_maps_are_maps(
    registry: SchemasTopic, source: Any
) -> None:
    schema = {"type": "object", "properties": {
        "any": {}, "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    }}  # fmt: skip
    sid = registry.register("events-value", schema, "JSON")
    doc = {"any": {"a": [1, 2]}, "counts": {"x": 1}}
    out = decode(source, "events-value",
                 [struct.pack(">bI", 0, sid) + json.dumps(doc).encode()], fmt="json")  # fmt: skip
    assert out.column("value").to_pylist() == [{"any": '{"a":[1,2]}', "counts": [("x", 1)]}]


def test_the_reader_subject_must_exist_and_be_of_the_format(
    registry: SchemasTopic, source: Any
) -> None:
    registry.register("orders-value", V1)
    with pytest.raises(OptionError, match="subject 'nope-value'"):
        codec.resolve_field(source, "value", "avro", "nope-value", None)
    with pytest.raises(OptionError, match="valueFormat=json, but version 1 .* is a AVRO"):
        codec.resolve_field(source, "value", "json", "orders-value", None)


def test_encoded_values_read_back_with_their_schema(registry: SchemasTopic, source: Any) -> None:
    sid = registry.register("all-value", ALL_TYPES)
    typed = codec.resolve_field(source, "value", "avro", "all-value", None)
    decoder = codec.FieldDecoder(typed, source)
    t = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    record = {
        "b": False, "f": 0.5, "d": 1.0, "by": b"", "fx": b"zz", "e": "A",
        "u": {"member0": 3, "member1": None, "member2": None}, "il": None, "arr": [],
        "m": [("a", 1), ("b", 2)], "dt": datetime.date(2020, 1, 1), "tsm": t, "tsu": t,
        "dec": decimal.Decimal("1.00"), "tm": 5, "uid": str(uuid.uuid4()), "rec": {"x": 1},
    }  # fmt: skip
    column = pa.array([record, None], decoder.type)
    encoder = codec.AvroEncoder(codec.AvroEncoding("value", "all-value", typed.reader))
    framed = encoder.encode(column)
    assert framed[0].as_py()[:5] == struct.pack(">bI", 0, sid) and framed[1].as_py() is None
    assert decoder.decode(framed, None).values.to_pylist() == [record, None]


def test_decoding_specs_are_plain_data(registry: SchemasTopic) -> None:
    registry.register("orders-value", V1)
    source = open_source(None, str(registry.storage.root))
    decoding = codec.Decoding(source, (codec.resolve_field(source, "value", "avro",
                                                           "orders-value", None),))  # fmt: skip
    again = pickle.loads(pickle.dumps(decoding))
    assert again.fields == decoding.fields


def test_recursive_avro_records_are_refused() -> None:
    node = {"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}
    with pytest.raises(ValueError, match="recursive"):
        types.avro_node(fastavro.parse_schema(node))


def test_framing_for_the_jvm_rewrites_only_unplanned_schemas_row_by_row(
    registry: SchemasTopic, source: Any
) -> None:
    v1 = registry.register("orders-value", V1)
    v2 = registry.register("orders-value", V2)
    v3_schema = {**V2, "fields": [*V2["fields"], {"name": "x", "type": "string", "default": ""}]}
    v3 = registry.register("orders-value", v3_schema)
    typed = codec.resolve_field(source, "value", "avro", "orders-value", 1)
    planned = dataclasses.replace(typed, jvm_writers=(v1,))  # v2, v3: registered later
    rows = [
        avro(V2, {"id": 0, "item": "a", "qty": 1, "note": None}, v2),
        avro(V1, {"id": 1, "item": "b"}, v1),
        avro(v3_schema, {"id": 2, "item": "c", "qty": 1, "note": None, "x": "y"}, v3),
        avro(V2, {"id": 3, "item": "d", "qty": 1, "note": None}, v2),
        None,
    ]
    f = codec.FieldDecoder(planned, source).frame_for_jvm(pa.array(rows, pa.binary()), None)
    assert f.errors == {}
    assert f.schema_ids.to_pylist() == [v2, v1, v3, v2, None]
    assert f.as_ids.to_pylist() == [v1, v1, v1, v1, None]
    assert f.payload[1].as_py() == rows[1][5:]  # a planned schema's payload, untouched
    reader = fastavro.parse_schema(V1)
    got = [fastavro.schemaless_reader(io.BytesIO(f.payload[i].as_py()), reader)
           for i in range(4)]  # fmt: skip
    assert got == [{"id": i, "item": "abcd"[i]} for i in range(4)]  # each in its own row
