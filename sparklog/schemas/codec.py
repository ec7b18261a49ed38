"""Registry-framed keys and values ⇄ Arrow: Avro and JSON decoding, Avro encoding.

**Framing** (Confluent's wire format: a schema id or GUID before the payload, or the GUID
in a header) is found by ``sparklog.schemas.framing``.

**Decoding** (``FieldDecoder``, in executors): each record is decoded with its own writer
schema and resolved to the query's *reader* schema (``TypedField``, chosen on the
driver), into an Arrow array of the reader schema's type (``sparklog.schemas.types``).
Avro: fastavro's ``schemaless_reader(payload, writer, reader)`` per record, which applies
Avro's resolution rules (fields the reader added get their defaults, fields it lacks are
dropped, promotions such as int → long); the rows of one writer schema are decoded
together. JSON: the payloads of a batch are parsed at once by ``pyarrow.json`` with the
reader type as explicit schema, or, for types it cannot parse (maps, JSON text, dates)
or when that fails, document by document. A null key or value (a tombstone) decodes to
null. Schemas are fetched on first use by id (or GUID) from the ``SchemaSource``, so a
schema registered while a stream runs is found by the executors that meet it.

**Framing for the JVM** (``FieldDecoder.frame_for_jvm``, the default for Avro in a
``format("sparklog")`` read): the reader only unframes; Spark's ``from_avro`` decodes
(``sparklog.schemas.spark.jvm_decode``, one expression per writer schema the query
planned, ``TypedField.jvm_writers``). A record of a schema the plan lacks (registered
after the query started) is decoded here and written again with the reader schema.

A record that cannot be decoded - no magic byte, too short, an unknown schema id, a
schema of the wrong type, a payload the schema cannot read, a writer schema the reader
schema cannot resolve - raises ``SchemaDecodeError`` naming the topic, partition, offset
and why; with ``fail_on_error=False`` its column is null and the error column holds why.

**Encoding** (``AvroEncoder``, the writer side): Arrow rows of the Spark type of a schema
(the struct a DataFrame writes) are written with fastavro's ``schemaless_writer`` and
framed with magic 0 + the schema id.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import (
    InvalidSchemaError,
    OptionError,
    SchemaDecodeError,
    SchemaNotFoundError,
    SchemaRegistryError,
    UnusableWriterSchemaError,
)
from sparklog.schemas import types, values
from sparklog.schemas.framing import frames
from sparklog.schemas.model import (
    AVRO,
    JSON,
    KEY_SCHEMA_ID_HEADER,
    MAGIC,
    VALUE_SCHEMA_ID_HEADER,
    RegisteredSchema,
)
from sparklog.schemas.source import SchemaSource
from sparklog.schemas.types import Node

FORMATS = {"avro": AVRO, "json": JSON}


# ---------------------------------------------------------------------------- schemas


@dataclass(frozen=True)
class TypedField:
    """How one column (``key`` or ``value``) of a query is typed: plain data, chosen on
    the driver and pickled to executors. ``reader`` is the schema every record is resolved
    to; ``references`` are its dependencies (reference name, schema), dependencies first."""

    field: str
    format: str  # "avro" | "json"
    subject: str
    version: int
    reader: RegisteredSchema
    references: tuple[tuple[str, RegisteredSchema], ...] = ()
    #: Avro decoded in the JVM (``sparklog.schemas.spark.jvm_decode``): the ids of the
    #: writer schemas the query's plan decodes; empty: decoded here, in Python
    jvm_writers: tuple[int, ...] = ()

    @property
    def header(self) -> str:
        return KEY_SCHEMA_ID_HEADER if self.field == "key" else VALUE_SCHEMA_ID_HEADER

    def node(self) -> Node:
        """The reader schema's type (``sparklog.schemas.types``)."""
        if self.format == "json":
            return types.json_node(
                json.loads(self.reader.schema),
                {name: json.loads(s.schema) for name, s in self.references},
            )
        return types.avro_node(avro_schema(self.reader, [s for _, s in self.references]))


def named_references(
    source: SchemaSource, schema: RegisteredSchema
) -> tuple[tuple[str, RegisteredSchema], ...]:
    """``schema``'s references, transitively, as (reference name, schema), dependencies
    first."""
    out: dict[str, RegisteredSchema] = {}

    def visit(s: RegisteredSchema, depth: int) -> None:
        if depth > 64:
            raise InvalidSchemaError(f"schema {schema.id}: references nest too deep")
        for ref in s.references:
            dep = source.version(ref.subject, ref.version).schema
            visit(dep, depth + 1)
            out.setdefault(ref.name, dep)

    visit(schema, 0)
    return tuple(out.items())


def resolve_field(
    source: SchemaSource, field: str, fmt: str, subject: str, version: int | None
) -> TypedField:
    """The reader schema of ``field``: version ``version`` of ``subject`` (None: its
    latest now). A missing subject or version, or a schema of another type than ``fmt``,
    is an ``OptionError`` saying which."""
    try:
        sv = source.latest(subject) if version is None else source.version(subject, version)
    except SchemaRegistryError as e:
        which = "latest version" if version is None else f"version {version}"
        raise OptionError(f"{field}: the {which} of subject {subject!r}: {e}") from None
    if sv.schema.schema_type != FORMATS[fmt]:
        raise OptionError(
            f"{field}Format={fmt}, but version {sv.version} of subject {subject!r} is a "
            f"{sv.schema.schema_type} schema (id {sv.schema.id})"
        )
    typed = TypedField(
        field, fmt, sv.subject, sv.version, sv.schema, named_references(source, sv.schema)
    )
    try:
        typed.node()
    except (InvalidSchemaError, KeyError, TypeError, ValueError) as e:
        raise OptionError(f"{field}: subject {subject!r} version {sv.version}: {e}") from None
    return typed


def _strip(schema: Any) -> Any:
    """fastavro's parsed schema without its bookkeeping keys."""
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if not k.startswith("__")}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


#: logical types decoded as their plain type (Spark: time-millis is an int; uuid a string)
_PLAIN_LOGICAL = ("time-millis", "uuid")


def avro_schema(
    schema: RegisteredSchema, dependencies: Sequence[RegisteredSchema], *, decoding: bool = True
) -> Any:
    """A self-contained Avro schema (dict) of ``schema``: full names, the types it takes
    from its references defined where first used. ``decoding``: without the logical types
    Spark reads as plain types (fastavro would make ``time`` and ``UUID`` objects)."""
    import fastavro

    named: dict[str, Any] = {}
    try:
        for dep in dependencies:
            fastavro.parse_schema(json.loads(dep.schema), named_schemas=named)
        parsed = _strip(fastavro.parse_schema(json.loads(schema.schema), named_schemas=named))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
        raise InvalidSchemaError(f"schema {schema.id}: not a valid Avro schema: {e}") from None
    named = {k: _strip(v) for k, v in named.items()}
    defined: set[str] = set()

    def expand(s: Any) -> Any:
        if isinstance(s, str):
            if s in named and s not in defined:
                return expand(named[s])
            return s
        if isinstance(s, list):
            return [expand(m) for m in s]
        if not isinstance(s, dict):
            return s
        out = dict(s)
        if out.get("type") in ("record", "error", "enum", "fixed"):
            defined.add(str(out["name"]))
        if decoding and out.get("logicalType") in _PLAIN_LOGICAL:
            del out["logicalType"]
        if "fields" in out:
            out["fields"] = [{**f, "type": expand(f["type"])} for f in out["fields"]]
        for key in ("items", "values"):
            if key in out:
                out[key] = expand(out[key])
        if isinstance(out.get("type"), (dict, list)):
            out["type"] = expand(out["type"])
        return out

    return expand(parsed)


# ---------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class Decoding:
    """What a typed read decodes (plain data, pickled to executors): ``fields`` (key and/or
    value) with their reader schemas, where schemas come from, and whether an undecodable
    record fails the read (else: null, and the error column says why)."""

    source: SchemaSource
    fields: tuple[TypedField, ...]
    fail_on_error: bool = True

    def extra_fields(self) -> list[pa.Field]:
        """The columns a typed read adds after the Kafka columns: ``<field>SchemaId`` (the
        writer schema's id) per typed field, then ``<field>DecodeError`` if errors do not
        fail the read, then, per field decoded in the JVM, ``jvm_column(field)``: the id of
        the schema its payload is written with now (``FieldDecoder.frame_for_jvm``)."""
        out = [pa.field(f"{t.field}SchemaId", pa.int32()) for t in self.fields]
        if not self.fail_on_error:
            out += [pa.field(f"{t.field}DecodeError", pa.string()) for t in self.fields]
        out += [pa.field(jvm_column(t.field), pa.int32()) for t in self.fields if t.jvm_writers]
        return out


def jvm_column(field: str) -> str:
    """The hidden column that says which writer schema the JVM decodes a row with."""
    return f"__sparklog_{field}_as"


@dataclass
class Framed:
    """One column unframed for the JVM: Avro payloads, the writer schema ids, the ids of
    the schemas the payloads are written with now (``FieldDecoder.frame_for_jvm``)."""

    payload: pa.Array
    schema_ids: pa.Array
    as_ids: pa.Array
    errors: dict[int, str]


@dataclass
class Decoded:
    """One column decoded: values of the reader type, writer schema ids, errors by row."""

    values: pa.Array
    schema_ids: pa.Array
    errors: dict[int, str]


class FieldDecoder:
    """Decodes one column of records, each with its own writer schema, into the reader
    type of ``typed`` (module docstring). Caches parsed writer schemas; not thread-safe."""

    def __init__(self, typed: TypedField, source: SchemaSource) -> None:
        self.typed = typed
        self.source = source
        self.node = typed.node()
        self.type = types.nullable(self.node.type)  # as Spark is given it (spark.nullable)
        self._avro = typed.format == "avro"
        self._named_returns = self._avro and types.has_union(self.node)
        self._fix = values.avro_fixer(self.node, self._named_returns) if self._avro else None
        self._json = None if self._avro else values.json_converter(self.node)
        self._reader: Any = None
        if self._avro:
            import fastavro

            deps = [s for _, s in typed.references]
            self._reader = fastavro.parse_schema(avro_schema(typed.reader, deps))
        self._writers: dict[tuple[int, str], Any] = {}

    def _writer(self, ref: tuple[str, Any]) -> tuple[RegisteredSchema, Any]:
        """The writer schema a frame names, and its parsed form (Avro; None: the reader)."""
        kind, key = ref
        try:
            schema = self.source.by_id(int(key)) if kind == "id" else self.source.by_guid(key)
        except SchemaNotFoundError:
            what = f"schema id {key}" if kind == "id" else f"schema GUID {key}"
            raise UnusableWriterSchemaError(f"{what} is not in the schema registry") from None
        expected = FORMATS[self.typed.format]
        if schema.schema_type != expected:
            raise UnusableWriterSchemaError(
                f"schema id {schema.id} is a {schema.schema_type} schema, not {expected} "
                f"({self.typed.field}Format={self.typed.format})"
            )
        if not self._avro or schema.id == self.typed.reader.id:
            return schema, None
        key = (schema.id, schema.guid)  # a registry may answer a GUID without its id
        parsed = self._writers.get(key)
        if parsed is None:
            import fastavro

            try:
                parsed = fastavro.parse_schema(avro_schema(schema, self.source.referenced(schema)))
            except InvalidSchemaError as e:
                raise UnusableWriterSchemaError(str(e)) from None
            self._writers[key] = parsed
        return schema, parsed

    def decode(self, column: pa.Array, headers: pa.Array | None) -> Decoded:
        f = frames(column, headers, self.typed.header)
        n = len(column)
        errors = dict(f.errors)
        out: list[Any] = [None] * n
        ids: list[int | None] = []
        json_rows: list[int] = []
        for k, ref in enumerate(f.refs):
            rows = pc.indices_nonzero(pc.fill_null(pc.equal(f.which, k), False))
            try:
                schema, writer = self._writer(ref)
            except UnusableWriterSchemaError as e:
                ids.append(None)
                errors.update((i, str(e)) for i in rows.to_pylist())
                continue
            ids.append(schema.id if schema.id >= 0 else None)
            if not self._avro:
                json_rows += rows.to_pylist()
                continue
            self._decode_avro(
                rows.to_pylist(), pc.take(f.payload, rows).to_pylist(), schema, writer, out, errors
            )
        schema_ids = pc.take(pa.array(ids, pa.int32()), f.which) if ids else pa.nulls(n, pa.int32())
        if json_rows:
            return self._decode_json(sorted(json_rows), f.payload, schema_ids, out, errors)
        return self._finish(out, schema_ids, errors)

    def frame_for_jvm(self, column: pa.Array, headers: pa.Array | None) -> Framed:
        """The column unframed for ``jvm_decode``: each row's Avro payload and the id of the
        schema it is written with. Rows of a writer schema the JVM's plan has
        (``TypedField.jvm_writers``) go as they are; the rare rows of a schema registered
        since the query started are decoded here and written again with the reader schema
        (so the JVM reads them as the reader's). Vectorised but for those rows."""
        f = frames(column, headers, self.typed.header)
        n = len(column)
        errors = dict(f.errors)
        known = set(self.typed.jvm_writers)
        ids: list[int | None] = []
        as_ids: list[int | None] = []
        payload = f.payload
        redone: dict[int, bytes] = {}
        for k, ref in enumerate(f.refs):
            if ref[0] == "id" and int(ref[1]) in known:
                ids.append(int(ref[1]))
                as_ids.append(int(ref[1]))
                continue
            rows = pc.indices_nonzero(pc.fill_null(pc.equal(f.which, k), False))
            try:
                schema, writer = self._writer(ref)
            except UnusableWriterSchemaError as e:
                ids.append(None)
                as_ids.append(None)
                errors.update((i, str(e)) for i in rows.to_pylist())
                continue
            ids.append(schema.id)
            if schema.id in known:  # a GUID of a schema the plan has
                as_ids.append(schema.id)
                continue
            as_ids.append(self.typed.reader.id)
            values: list[Any] = [None] * n
            self._decode_avro(
                rows.to_pylist(),
                pc.take(payload, rows).to_pylist(),
                schema,
                writer,
                values,
                errors,
                fix=False,
            )
            for i in rows.to_pylist():
                if i in errors:
                    continue
                try:
                    redone[i] = self._encode_reader(values[i])
                except Exception as e:  # fastavro raises many kinds
                    errors[i] = (
                        f"schema id {schema.id}: cannot write it again with the "
                        f"reader schema: {type(e).__name__}: {e}"
                    )
        if redone:
            order = sorted(redone)  # replace_with_mask fills the masked rows in row order
            at = pa.array(order, pa.int64())
            mask = pc.is_in(pa.array(range(n), pa.int64()), value_set=at)
            payload = pc.replace_with_mask(
                payload, mask, pa.array([redone[i] for i in order], pa.binary())
            )
        which = f.which
        if errors:  # an error row has no schema to decode with
            bad = pa.array(sorted(errors), pa.int64())
            mask = pc.is_in(pa.array(range(n), pa.int64()), value_set=bad)
            which = pc.if_else(mask, pa.scalar(None, pa.int32()), which)
        if not ids:
            nulls = pa.nulls(n, pa.int32())
            return Framed(payload, nulls, nulls, errors)
        schema_ids = pc.take(pa.array(ids, pa.int32()), f.which)
        return Framed(payload, schema_ids, pc.take(pa.array(as_ids, pa.int32()), which), errors)

    def _encode_reader(self, value: Any) -> bytes:
        from fastavro import schemaless_writer

        buf = io.BytesIO()
        schemaless_writer(buf, self._reader, value)
        return buf.getvalue()

    def _decode_avro(
        self,
        rows: list[int],
        payloads: list[bytes],
        schema: RegisteredSchema,
        writer: Any,
        out: list[Any],
        errors: dict[int, str],
        *,
        fix: bool = True,
    ) -> None:
        from fastavro import schemaless_reader

        if writer is None:
            writer, reader = self._reader, None
        else:
            reader = self._reader
        named = self._named_returns
        fixer = self._fix if fix else None
        for i, p in zip(rows, payloads, strict=True):
            try:
                v = schemaless_reader(io.BytesIO(p), writer, reader, return_named_type=named)
                out[i] = v if fixer is None else fixer(v)
            except Exception as e:  # fastavro raises many kinds for a bad payload
                errors[i] = f"schema id {schema.id}: {type(e).__name__}: {e}"

    def _decode_json(
        self,
        rows: list[int],
        payload: pa.Array,
        schema_ids: pa.Array,
        out: list[Any],
        errors: dict[int, str],
    ) -> Decoded:
        taken = pc.take(payload, pa.array(rows, pa.int64()))
        texts = taken.to_pylist()
        fast = values.parse_json(texts, self.node) if not errors else None
        if fast is not None and len(rows) == len(out):
            return Decoded(fast.cast(self.type), schema_ids, errors)
        convert = self._json
        assert convert is not None
        for i, text in zip(rows, texts, strict=True):
            try:
                out[i] = convert(json.loads(text))
            except (ValueError, UnicodeDecodeError) as e:
                errors[i] = f"not a JSON document of the reader schema's type: {e}"
        return self._finish(out, schema_ids, errors)

    def _finish(self, out: list[Any], schema_ids: pa.Array, errors: dict[int, str]) -> Decoded:
        array, more = values.to_arrow(out, self.type)
        errors.update(more)
        return Decoded(array, schema_ids, errors)


_DECODERS: dict[Any, FieldDecoder] = {}
_MAX_DECODERS = 32


def field_decoder(typed: TypedField, source: SchemaSource) -> FieldDecoder:
    """A ``FieldDecoder``, reused by later tasks of the same Python worker (Spark reuses
    workers), so each writer schema is fetched and parsed once per worker."""
    key = (
        type(source).__name__,
        getattr(source, "url", None),
        getattr(source, "root", None),
        typed,
    )
    found = _DECODERS.get(key)
    if found is None:
        if len(_DECODERS) >= _MAX_DECODERS:
            _DECODERS.pop(next(iter(_DECODERS)))
        found = _DECODERS[key] = FieldDecoder(typed, source)
    return found


def decode_batch(
    decoding: Decoding, batch: pa.RecordBatch, headers: pa.Array | None, where: str
) -> pa.RecordBatch:
    """``batch`` (Kafka columns, with ``offset``) with its typed fields decoded in place
    and ``Decoding.extra_fields`` appended. ``where`` (``topic-partition``) names the
    records in a ``SchemaDecodeError``."""
    columns = {name: batch.column(name) for name in batch.schema.names}
    ids: list[pa.Array] = []
    errs: list[pa.Array] = []
    as_ids: list[pa.Array] = []
    for typed in decoding.fields:
        decoder = field_decoder(typed, decoding.source)
        d: Decoded | Framed
        if typed.jvm_writers:
            d = decoder.frame_for_jvm(batch.column(typed.field), headers)
            as_ids.append(d.as_ids)
        else:
            d = decoder.decode(batch.column(typed.field), headers)
        if d.errors and decoding.fail_on_error:
            row = min(d.errors)
            offset = batch.column("offset")[row].as_py()
            raise SchemaDecodeError(
                f"{where} offset {offset}: cannot decode the {typed.field} with subject "
                f"{typed.subject!r} version {typed.version}: {d.errors[row]}"
                + (f" ({len(d.errors) - 1} more in this batch)" if len(d.errors) > 1 else "")
                + " (failOnDecodeError=false reads it as null)"
            )
        if isinstance(d, Framed):
            columns[typed.field] = d.payload
        else:
            columns[typed.field] = d.values
        ids.append(d.schema_ids)
        text: list[str | None] = [None] * batch.num_rows
        for i, why in d.errors.items():
            text[i] = why
        errs.append(pa.array(text, pa.string()))
    extra = ids + ([] if decoding.fail_on_error else errs) + as_ids
    names = list(columns) + [f.name for f in decoding.extra_fields()]
    return pa.RecordBatch.from_arrays([*columns.values(), *extra], names=names)


# ---------------------------------------------------------------------------- encoding


@dataclass(frozen=True)
class AvroEncoding:
    """How a writer frames one column (plain data): as ``schema``, registered under
    ``subject`` (its references: (name, schema), dependencies first)."""

    field: str
    subject: str
    schema: RegisteredSchema
    references: tuple[tuple[str, RegisteredSchema], ...] = ()


class AvroEncoder:
    """Arrow values of the Spark type of ``encoding.schema`` → registry-framed Avro
    (magic 0 + schema id + fastavro's ``schemaless_writer``); null stays null."""

    def __init__(self, encoding: AvroEncoding) -> None:
        import fastavro

        self.encoding = encoding
        expanded = avro_schema(encoding.schema, [s for _, s in encoding.references])
        self._parsed = fastavro.parse_schema(expanded)
        node = types.avro_node(expanded)
        self._fix = values.avro_encoder(node, expanded, values.named_types(expanded))
        self._prefix = struct.pack(">bI", MAGIC, encoding.schema.id)

    def encode(self, column: pa.Array) -> pa.Array:
        """ValueError naming the row and schema if a value does not fit the schema."""
        from fastavro import schemaless_writer

        fix = self._fix
        out: list[bytes | None] = []
        for i, v in enumerate(column.to_pylist()):
            if v is None:
                out.append(None)
                continue
            buf = io.BytesIO()
            buf.write(self._prefix)
            try:
                schemaless_writer(buf, self._parsed, v if fix is None else fix(v))
            except Exception as e:  # fastavro raises many kinds for a value that does not fit
                e_ = self.encoding
                raise ValueError(
                    f"row {i}: the {e_.field} does not fit schema id {e_.schema.id} of subject "
                    f"{e_.subject!r}: {type(e).__name__}: {e}"
                ) from None
            out.append(buf.getvalue())
        return pa.array(out, pa.binary())


_ENCODERS: dict[AvroEncoding, AvroEncoder] = {}


def avro_encoder(encoding: AvroEncoding) -> AvroEncoder:
    """An ``AvroEncoder``, one per schema per Python worker (Spark reuses workers)."""
    found = _ENCODERS.get(encoding)
    if found is None:
        if len(_ENCODERS) >= _MAX_DECODERS:
            _ENCODERS.clear()
        found = _ENCODERS[encoding] = AvroEncoder(encoding)
    return found
