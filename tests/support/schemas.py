"""Schemas and Avro records the schema tests share (tests/schemas, tests/export,
tests/datasource): two versions of a record schema, one field of every Avro type, a
``_schemas`` topic written in storage, Confluent-framed Avro values."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro

from sparklog.schemas.model import Reference
from sparklog.schemas.registry import SCHEMAS_TOPIC, RegistryState
from sparklog.storage import Storage
from sparklog.storage.records import make_records

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}


V2 = {
    **V1,
    "fields": [
        *V1["fields"],
        {"name": "qty", "type": "int", "default": 1},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


class SchemasTopic:
    """A storage root's ``_schemas``, written with the records the broker would write."""

    def __init__(self, root: str) -> None:
        self.storage = Storage(root)
        self.state = RegistryState()
        self.storage.topics.create(SCHEMAS_TOPIC, 1, {"cleanup.policy": "compact"})

    def register(
        self, subject: str, schema: Any, schema_type: str = "AVRO", refs: list[Reference] = ()
    ) -> int:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        parsed = self.state.parse_request(text, schema_type, [r.to_json() for r in refs])
        sv, records = self.state.register(subject, parsed)
        if records:
            log = self.storage.open_log(SCHEMAS_TOPIC, 0)
            log.append(make_records([v for _, v in records], keys=[k for k, _ in records]))
            log.close()
        return sv.schema.id

    def guid(self, schema_id: int) -> str:
        return self.state.by_id(schema_id).guid


def avro(schema: Any, record: Any, schema_id: int | None) -> bytes:
    buf = io.BytesIO()
    if schema_id is not None:
        buf.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


ALL_TYPES = {
    "type": "record", "name": "All", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "f", "type": "float"},
        {"name": "d", "type": "double"}, {"name": "by", "type": "bytes"},
        {"name": "fx", "type": {"type": "fixed", "name": "F2", "size": 2}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "u", "type": ["int", "string", {"type": "record", "name": "In",
                                                 "fields": [{"name": "x", "type": "int"}]}]},
        {"name": "il", "type": ["null", "int", "long"]},
        {"name": "arr", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "dt", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                 "scale": 2}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "rec", "type": ["null", "In"]},
    ],
}  # fmt: skip
