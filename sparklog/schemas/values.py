"""Decoded values ⇄ Arrow arrays of a schema's type (``sparklog.schemas.types.Node``).

- ``avro_fixer``: what fastavro decoded → what ``pa.array`` takes for the node's type
  (general unions become ``{"memberN": value}``); None where nothing needs changing, so
  plain schemas cost no Python per record beyond fastavro itself.
- ``avro_encoder``: the inverse, for fastavro's writer (maps from Arrow's key/value pairs,
  union structs to their one set member).
- ``json_converter``: a parsed JSON document → an Arrow-ready value (JSON text for
  untyped parts, ISO 8601 strings to datetimes); ``parse_json`` parses a batch of payloads
  at once with ``pyarrow.json`` where the type allows.
- ``to_arrow``: Python values → one Arrow array, and which rows could not be converted.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json

from sparklog.errors import JsonTypeError as JsonTypeError  # its old home: re-exported
from sparklog.schemas import types
from sparklog.schemas.types import Node

Fix = Callable[[Any], Any]
Resolve = Callable[[Any], Any]

# ---------------------------------------------------------------------------- Avro

_PY_TAGS: dict[type, tuple[str, ...]] = {
    bool: ("boolean",),
    int: ("int", "long"),
    float: ("double", "float"),
    str: ("string",),
    bytes: ("bytes",),
    list: ("array",),
    dict: ("map",),
    decimal.Decimal: ("bytes",),
    datetime.date: ("int",),
    datetime.datetime: ("long",),
    datetime.time: ("int", "long"),
}


def _member(tags: Sequence[str], value: Any) -> int:
    """The union member a decoded value (fastavro: ``(name, value)`` for named types)
    belongs to. Unnamed members are told apart by the value's Python type; of ``int`` and
    ``long`` (``float``, ``double``) in one union, a value goes to the first that holds it."""
    if isinstance(value, tuple):
        return list(tags).index(value[0])
    wanted = _PY_TAGS.get(type(value), ())
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**31) <= value < 2**31:
        wanted = ("long",)
    for i, tag in enumerate(tags):
        if tag in wanted:
            return i
    raise ValueError(f"no union member takes a {type(value).__name__}")


def avro_fixer(node: Node, named_returns: bool) -> Fix | None:
    """What turns a value fastavro decoded for ``node`` into an Arrow-ready one (None: it
    is ready). ``named_returns``: values of named types in unions come as (name, value)."""
    kind = node.kind
    unions = kind in (types.NULLABLE, types.UNION)
    if not node.fix and not (unions and named_returns) and not _below(node, named_returns):
        return None
    if kind == types.RECORD:
        fixes = [(k, f) for k, c in node.children if (f := avro_fixer(c, named_returns))]
        if not fixes:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for k, f in fixes:
                out[k] = f(out[k])
            return out

        return record
    if kind in (types.ARRAY, types.MAP):
        inner = avro_fixer(node.children[0][1], named_returns)
        if inner is None:
            return None
        if kind == types.ARRAY:
            return lambda v: None if v is None else [inner(x) for x in v]
        return lambda v: None if v is None else {k: inner(x) for k, x in v.items()}
    if kind == types.NULLABLE:
        f = avro_fixer(node.children[0][1], named_returns)

        def nullable(v: Any) -> Any:
            if isinstance(v, tuple):
                v = v[1]
            return v if v is None or f is None else f(v)

        return nullable
    if kind == types.UNION:
        tags = [t for t, _ in node.children]
        fixes_ = [avro_fixer(c, named_returns) for _, c in node.children]
        names = [f"member{i}" for i in range(len(tags))]

        def union(v: Any) -> Any:
            if v is None:
                return None
            i = _member(tags, v)
            if isinstance(v, tuple):
                v = v[1]
            f = fixes_[i]
            return {names[i]: v if f is None else f(v)}

        return union
    return None


def _below(node: Node, named_returns: bool) -> bool:
    """Whether a union (whose values need unwrapping) is below ``node``."""
    if not named_returns:
        return False
    return any(c.kind in (types.NULLABLE, types.UNION) or _below(c, True) for _, c in node.children)


def named_types(schema: Any) -> dict[str, Any]:
    """The named types a self-contained Avro schema defines, by full name."""
    out: dict[str, Any] = {}

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for m in s:
                walk(m)
        elif isinstance(s, dict):
            if s.get("type") in ("record", "error", "enum", "fixed"):
                out[str(s["name"])] = s
            for f in s.get("fields", ()):
                walk(f["type"])
            for key in ("items", "values", "type"):
                if isinstance(s.get(key), (dict, list)):
                    walk(s[key])

    walk(schema)
    return out


def avro_encoder(node: Node, schema: Any, named: Mapping[str, Any]) -> Fix | None:
    """What turns an Arrow value (``to_pylist``) of ``node``'s type into what fastavro
    writes for ``schema`` (None: it is ready); ``named`` resolves type names."""
    while isinstance(schema, str) and schema in named:
        schema = named[schema]
    while isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        schema = schema["type"]
    kind = node.kind
    if kind == types.RECORD:
        fields = {str(f["name"]): f["type"] for f in schema["fields"]}
        fixes = [(k, f) for k, c in node.children if (f := avro_encoder(c, fields[k], named))]
        if not fixes:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for k, f in fixes:
                out[k] = f(out.get(k))
            return out

        return record
    if kind == types.ARRAY:
        inner = avro_encoder(node.children[0][1], schema["items"], named)
        return None if inner is None else (lambda v: None if v is None else [inner(x) for x in v])
    if kind == types.MAP:
        g = avro_encoder(node.children[0][1], schema["values"], named)
        return lambda v: None if v is None else {k: (x if g is None else g(x)) for k, x in v}
    members = schema if isinstance(schema, list) else [schema]
    rest = [m for m in members if m != "null"]
    if kind == types.NULLABLE:
        f = avro_encoder(node.children[0][1], rest[0], named) if len(rest) == 1 else None
        return None if f is None else (lambda v: None if v is None else f(v))
    if kind == types.UNION:
        parts = []
        for i, ((_, c), m) in enumerate(zip(node.children, rest, strict=True)):
            target = named.get(m, m) if isinstance(m, str) else m
            is_record = isinstance(target, dict) and target.get("type") == "record"
            name = str(target["name"]) if is_record else None
            parts.append((f"member{i}", avro_encoder(c, m, named), name))

        def union(v: Any) -> Any:
            if v is None:
                return None
            for key, enc, name in parts:
                x = v.get(key)
                if x is not None:
                    x = x if enc is None else enc(x)
                    return x if name is None else (name, x)
            return None

        return union
    return None


# ---------------------------------------------------------------------------- JSON


def _json_text(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _timestamp(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, str):
        raise JsonTypeError(f"expected a date-time string, got {type(v).__name__}")
    t = datetime.datetime.fromisoformat(v)
    return t if t.tzinfo is not None else t.replace(tzinfo=datetime.UTC)


def _date(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, str):
        raise JsonTypeError(f"expected a date string, got {type(v).__name__}")
    return datetime.date.fromisoformat(v)


def json_converter(node: Node) -> Fix:
    """A parsed JSON document → an Arrow-ready value of ``node``'s type; JsonTypeError when
    its shape differs (scalars are checked by ``pa.array``)."""
    kind = node.kind
    if kind == types.JSON_TEXT:
        return _json_text
    if kind == types.TIMESTAMP:
        return _timestamp
    if kind == types.DATE:
        return _date
    if kind == types.RECORD:
        fixes = [(k, json_converter(c)) for k, c in node.children if c.fix]

        def record(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise JsonTypeError(f"expected an object, got {type(v).__name__}")
            if not fixes:
                return v
            out = dict(v)
            for k, f in fixes:
                out[k] = f(v.get(k))
            return out

        return record
    if kind == types.ARRAY:
        item = json_converter(node.children[0][1])

        def array(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, list):
                raise JsonTypeError(f"expected an array, got {type(v).__name__}")
            return [item(x) for x in v]

        return array
    if kind == types.MAP:
        value = json_converter(node.children[0][1])

        def mapping(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise JsonTypeError(f"expected an object, got {type(v).__name__}")
            return {str(k): value(x) for k, x in v.items()}

        return mapping
    return lambda v: v


def parse_json(payloads: list[bytes], node: Node) -> pa.Array | None:
    """All ``payloads`` parsed at once into ``node``'s type by ``pyarrow.json``, or None if
    the type needs Python (``types.fast_json``) or any document does not parse or fit
    (then the caller parses them one by one, to say which)."""
    if not payloads or not types.fast_json(node):
        return None
    schema = pa.schema([pa.field(f.name, f.type) for f in node.type])
    options = pa_json.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=True
    )
    try:
        table = pa_json.read_json(io.BytesIO(b"\n".join(payloads)), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != len(payloads):  # a payload held no document, or several
        return None
    arrays = [c.combine_chunks() for c in table.columns]
    try:
        return pa.StructArray.from_arrays(arrays, names=table.column_names).cast(node.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


# ---------------------------------------------------------------------------- Arrow


def to_arrow(values: list[Any], arrow_type: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    """``values`` as one array of ``arrow_type``; values that do not convert become null,
    and why, by row, is returned."""
    try:
        return pa.array(values, arrow_type), {}
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        pass
    errors: dict[int, str] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            pa.array([v], arrow_type)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            errors[i] = f"does not fit the reader schema's type: {e}"
            values[i] = None
    return pa.array(values, arrow_type), errors
