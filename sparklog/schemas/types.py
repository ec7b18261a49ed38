"""Avro and JSON Schema types as Arrow types, typed as Spark types them.

A decoded value column is an Arrow array of exactly the type Spark expects for the Spark
type of the reader schema (``pyspark.sql.pandas.types.to_arrow_type``: lists of
``element``, maps of a non-null ``key`` and a ``value``, timestamps in microseconds UTC),
so ``Node.type`` follows Spark's naming and nullability, and
``sparklog.schemas.spark.spark_type`` turns it into the Spark type.

**Avro** (the same as Spark's ``from_avro``, ``SchemaConverters.toSqlType``):

=========================================  ==============================================
Avro                                       Spark (Arrow)
=========================================  ==============================================
record                                     struct (field nullability from its type)
enum, string (also ``uuid``)               string
fixed, bytes                               binary
``decimal`` on bytes or fixed              decimal(p, s)
int; ``date``; ``time-millis``             int; date; int
long; ``timestamp-millis``/``-micros``     bigint; timestamp (microseconds, UTC)
``local-timestamp-millis``/``-micros``     timestamp_ntz
``time-micros``                            time(6)
float, double, boolean                     float, double, boolean
null                                       void
array<T>                                   array<T> (containsNull when T is nullable)
map<T>                                     map<string, T>
``[null, T]`` (either order)               T, nullable
``[int, long]``, ``[float, double]``       bigint, double (nullable with null)
other unions                               struct<member0, member1, ...> (null left out;
                                           every member nullable, one set per value)
=========================================  ==============================================

Everything that is not nullable above is non-nullable. Recursive records are refused, as
Spark refuses them.

**JSON Schema** (sparklog's own mapping; every field is nullable, since a JSON document may
leave any property out):

- ``object`` with ``properties`` → struct of them, in the schema's order (other properties
  in a document are ignored); with only ``additionalProperties: {schema}`` → map<string, T>;
- ``array`` with ``items: {schema}`` → array<T>;
- ``string`` → string (``format: date-time`` → timestamp, microseconds UTC; ``format: date``
  → date); ``integer`` → bigint; ``number`` → double; ``boolean`` → boolean;
- ``type: [T, "null"]``, and ``anyOf``/``oneOf`` of one schema and ``{"type": "null"}`` →
  T; ``$ref`` to ``#/definitions/...``, ``#/$defs/...`` or to a reference's name → what it
  points to; an ``enum`` of strings → string;
- anything else (no type, several types, other ``anyOf``/``oneOf``/``allOf``, ``const``,
  objects without properties, references nested deeper than 32) → string holding the
  value's JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparklog.errors import InvalidSchemaError

TIMESTAMP_US_UTC = pa.timestamp("us", tz="UTC")
#: JSON Schema ``$ref`` nesting beyond which a value is kept as JSON text
MAX_REF_DEPTH = 32

# Node kinds: how a decoded Python value becomes an Arrow value of ``Node.type``
PLAIN = "plain"  # as it is
RECORD = "record"  # dict of fields (children: the fields)
ARRAY = "array"  # list (children: [("element", node)])
MAP = "map"  # dict (children: [("value", node)])
UNION = "union"  # one member set (children: (member tag, node) per non-null member)
NULLABLE = "nullable"  # [null, T] or a widening union (children: [(tag, T)])
JSON_TEXT = "json"  # JSON: the value's JSON text
TIMESTAMP = "timestamp"  # JSON: an ISO 8601 date-time string
DATE = "date"  # JSON: an ISO 8601 date string

_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_NAMED = ("record", "enum", "fixed", "error")


@dataclass(frozen=True)
class Node:
    """The Arrow type of one schema node, and what a decoded value needs to become one:
    ``kind`` (above), ``children`` (name or member tag, node) and ``fix``: whether any
    value at or below this node needs converting (else ``pa.array`` takes it as it is)."""

    type: pa.DataType
    nullable: bool
    kind: str = PLAIN
    children: tuple[tuple[str, Node], ...] = ()
    fix: bool = False

    def field(self, name: str) -> pa.Field:
        return pa.field(name, self.type, nullable=self.nullable)


def _plain(t: pa.DataType, nullable: bool = False) -> Node:
    return Node(t, nullable)


# ---------------------------------------------------------------------------- Avro


def avro_type_name(schema: Any) -> str:
    """The Avro type of a (parsed) schema node: a primitive or complex type name, the full
    name of a named type, or ``union``."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        t = schema.get("type")
        if t in _NAMED:
            return str(schema["name"])
        return str(t) if isinstance(t, str) else avro_type_name(t)
    return str(schema)


def _base_type(schema: Any, named: Mapping[str, Any]) -> str:
    """The underlying Avro type (``int``, ``record``, ``array`` ...) of a node."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        t = schema.get("type")
        return t if isinstance(t, str) else _base_type(t, named)
    if schema in named:
        return _base_type(named[schema], named)
    return str(schema)


class _AvroTypes:
    """One walk over an Avro schema whose named types are full names (fastavro's parsed
    form); named types are remembered where they are defined."""

    def __init__(self, named: Mapping[str, Any] | None = None) -> None:
        self.named: dict[str, Any] = dict(named or {})
        self.stack: list[str] = []

    def node(self, schema: Any) -> Node:
        if isinstance(schema, list):
            return self.union(schema)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self.primitive(schema, None)
            if schema not in self.named:
                raise InvalidSchemaError(f"unknown Avro type {schema!r}")
            return self.node(self.named[schema])
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"not an Avro schema: {schema!r}")
        t = schema.get("type")
        if isinstance(t, (dict, list)):
            return self.node(t)
        logical = schema.get("logicalType")
        if t in _PRIMITIVES:
            return self.primitive(str(t), logical, schema)
        if t in ("record", "error"):
            return self.record(schema)
        if t in ("enum", "fixed"):
            self.named.setdefault(str(schema["name"]), schema)
            if t == "fixed" and logical == "decimal":
                return _plain(_decimal(schema))
            return _plain(pa.string() if t == "enum" else pa.binary())
        if t == "array":
            item = self.node(schema["items"])
            return Node(
                pa.list_(item.field("element")), False, ARRAY, (("element", item),), item.fix
            )
        if t == "map":
            value = self.node(schema["values"])
            key = pa.field("key", pa.string(), nullable=False)
            arrow = pa.map_(key, value.field("value"))
            return Node(arrow, False, MAP, (("value", value),), value.fix)
        return self.node(t)  # a named type's name, or a primitive as {"type": "int"}

    def primitive(self, t: str, logical: Any, schema: Any = None) -> Node:
        if t == "null":
            return _plain(pa.null(), True)
        if t == "int":
            return _plain(pa.date32() if logical == "date" else pa.int32())
        if t == "long":
            if logical in ("timestamp-millis", "timestamp-micros"):
                return _plain(TIMESTAMP_US_UTC)
            if logical in ("local-timestamp-millis", "local-timestamp-micros"):
                return _plain(pa.timestamp("us"))
            if logical == "time-micros":
                return _plain(pa.time64("ns"))
            return _plain(pa.int64())
        if t == "bytes" and logical == "decimal":
            return _plain(_decimal(schema))
        return _plain(
            {
                "boolean": pa.bool_(),
                "float": pa.float32(),
                "double": pa.float64(),
                "bytes": pa.binary(),
                "string": pa.string(),
            }[t]
        )

    def record(self, schema: Any) -> Node:
        name = str(schema["name"])
        if name in self.stack:
            raise InvalidSchemaError(
                f"the Avro record {name} is recursive: Spark has no type for it "
                "(as Spark's from_avro refuses it)"
            )
        self.named.setdefault(name, schema)
        self.stack.append(name)
        try:
            fields = [(str(f["name"]), self.node(f["type"])) for f in schema["fields"]]
        finally:
            self.stack.pop()
        arrow = pa.struct([n.field(name) for name, n in fields])
        return Node(arrow, False, RECORD, tuple(fields), any(n.fix for _, n in fields))

    def union(self, members: list[Any]) -> Node:
        rest = [m for m in members if _base_type(m, self.named) != "null"]
        nullable = len(rest) < len(members)
        bases = sorted(_base_type(m, self.named) for m in rest)
        if len(rest) == 1 or bases in (["int", "long"], ["double", "float"]):
            if len(rest) == 1:
                inner = self.node(rest[0])
            else:
                inner = _plain(pa.int64() if bases == ["int", "long"] else pa.float64())
            if not nullable:
                return Node(inner.type, inner.nullable, NULLABLE, (("", inner),), inner.fix)
            return Node(inner.type, True, NULLABLE, (("", inner),), inner.fix)
        if not rest:  # ["null"]: Spark makes it an empty struct
            return Node(pa.struct([]), True)
        children = tuple((avro_type_name(m), self.node(m)) for m in rest)
        arrow = pa.struct(
            [pa.field(f"member{i}", n.type, nullable=True) for i, (_, n) in enumerate(children)]
        )
        return Node(arrow, nullable, UNION, children, True)


def _decimal(schema: Any) -> pa.DataType:
    precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
    if not 0 < precision <= 38:
        raise InvalidSchemaError(f"decimal precision {precision}: Spark allows 1 to 38")
    return pa.decimal128(precision, scale)


def nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every field, list element and map value nullable (map keys never are):
    the Arrow form of a typed column, whose Spark type is nullable throughout
    (``sparklog.schemas.spark.nullable``)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, nullable(f.type), True) for f in t])
    if pa.types.is_map(t):
        key = pa.field("key", t.key_type, nullable=False)
        return pa.map_(key, pa.field("value", nullable(t.item_type), True))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, nullable(t.value_type), True))
    return t


def avro_node(schema: Any) -> Node:
    """The node of a self-contained parsed Avro schema (``sparklog.schemas.codec``'s
    ``AvroSchema.parsed``)."""
    return _AvroTypes().node(schema)


def has_union(node: Node) -> bool:
    """Whether a general union (``UNION``) is anywhere in ``node``."""
    return node.kind == UNION or any(has_union(n) for _, n in node.children)


# ---------------------------------------------------------------------------- JSON Schema


def _json_text() -> Node:
    return Node(pa.string(), True, JSON_TEXT, (), True)


class _JsonTypes:
    def __init__(self, root: Any, references: Mapping[str, Any]) -> None:
        self.root = root
        self.references = references

    def resolve(self, ref: str, base: Any) -> Any:
        doc_name, _, pointer = ref.partition("#")
        doc = base
        if doc_name:
            if doc_name not in self.references:
                raise InvalidSchemaError(f"$ref {ref!r}: no reference of that name")
            doc = self.references[doc_name]
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(doc, dict) or part not in doc:
                raise InvalidSchemaError(f"$ref {ref!r} points to nothing")
            doc = doc[part]
        return doc

    def node(self, schema: Any, depth: int = 0, base: Any = None) -> Node:
        base = self.root if base is None else base
        if depth > MAX_REF_DEPTH or not isinstance(schema, dict):
            return _json_text()
        if "$ref" in schema:
            ref = str(schema["$ref"])
            target = self.resolve(ref, base)
            doc_name = ref.partition("#")[0]
            return self.node(target, depth + 1, self.references[doc_name] if doc_name else base)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [s for s in schema[key] if not _is_null_schema(s)]
                if len(options) == 1:
                    return self.node(options[0], depth, base)
                return _json_text()
        t = schema.get("type")
        if isinstance(t, list):
            rest = [x for x in t if x != "null"]
            t = rest[0] if len(rest) == 1 else None
            if t is None:
                return _json_text()
        if t is None:
            if "properties" in schema:
                t = "object"
            elif "items" in schema:
                t = "array"
            elif isinstance(schema.get("enum"), list) and all(
                isinstance(v, str) for v in schema["enum"]
            ):
                t = "string"
        if "allOf" in schema or "const" in schema:
            return _json_text()
        if t == "object":
            props = schema.get("properties")
            if isinstance(props, dict) and props:
                fields = [(str(k), self.node(v, depth, base)) for k, v in props.items()]
                arrow = pa.struct([n.field(k) for k, n in fields])
                return Node(arrow, True, RECORD, tuple(fields), any(n.fix for _, n in fields))
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                value = self.node(extra, depth, base)
                key = pa.field("key", pa.string(), nullable=False)
                arrow = pa.map_(key, value.field("value"))
                return Node(arrow, True, MAP, (("value", value),), True)
            return _json_text()
        if t == "array":
            items = schema.get("items")
            item = self.node(items, depth, base) if isinstance(items, dict) else _json_text()
            return Node(
                pa.list_(item.field("element")), True, ARRAY, (("element", item),), item.fix
            )
        if t == "string":
            fmt = schema.get("format")
            if fmt == "date-time":
                return Node(TIMESTAMP_US_UTC, True, TIMESTAMP, (), True)
            if fmt == "date":
                return Node(pa.date32(), True, DATE, (), True)
            return _plain(pa.string(), True)
        simple = {
            "integer": pa.int64(),
            "number": pa.float64(),
            "boolean": pa.bool_(),
            "null": pa.null(),
        }
        if t in simple:
            return _plain(simple[str(t)], True)
        return _json_text()


def _is_null_schema(s: Any) -> bool:
    return isinstance(s, dict) and s.get("type") == "null"


def json_node(schema: Any, references: Mapping[str, Any] | None = None) -> Node:
    """The node of a JSON Schema document; ``references`` maps a reference's name (what a
    ``$ref`` names before ``#``) to its document."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    return _JsonTypes(schema, references or {}).node(schema)


def fast_json(node: Node) -> bool:
    """Whether ``pyarrow.json`` can parse documents of ``node`` straight into its type:
    an object whose fields are plain values, structs, lists and date-times (no maps, no
    JSON text, no dates)."""

    def ok(n: Node) -> bool:
        if n.kind in (MAP, JSON_TEXT, DATE):
            return False
        return all(ok(c) for _, c in n.children)

    return node.kind == RECORD and ok(node)
