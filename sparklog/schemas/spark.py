"""Typed topics on the Spark side: schema types as Spark types, Spark structs as Avro
schemas, and ``from_registry``, which decodes registry-framed Avro in the JVM.

- ``spark_type``: the Spark type of a ``sparklog.schemas.types`` Arrow type (the mapping
  tables are that module's docstring; for Avro it is Spark's own ``from_avro`` mapping).
- ``read_schema``: the columns of a typed ``format("sparklog")`` read.
- ``avro_for``: the Avro schema of a Spark type, as Spark's ``to_avro`` derives it (record
  ``topLevelRecord``, nested records named after their field, decimals as ``fixed``), except
  that a nullable type is ``["null", T]`` with default null, so that a later version may
  add or drop it compatibly.
- ``check_struct``: a DataFrame column against the Spark type of a registered schema,
  naming the first field that differs.
- ``from_registry(df, ...)``: decodes a binary column of registry-framed Avro (from
  ``format("sparklog")`` with binary values, or from Spark's own ``format("kafka")``) with
  Spark's built-in ``from_avro``, in the JVM: one ``from_avro`` per writer schema of the
  subject known when it is called, chosen by ``CASE WHEN`` on the frame's schema id (or,
  with a ``headers`` column, on the GUID of a ``__value_schema_id``/``__key_schema_id``
  header), each resolving to the reader schema (option ``avroSchema``). Needs spark-avro on
  the classpath (``jvm/spark/pom.xml`` fetches it). Records written with a schema
  registered after the call are errors (FAILFAST) or null (PERMISSIVE): call it again,
  or use ``format("sparklog")`` with ``valueFormat=avro``, which fetches new ids as it
  meets them.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklog.errors import OptionError, SchemaRegistryError
from sparklog.schemas.codec import (
    AvroEncoding,
    Decoding,
    TypedField,
    avro_schema,
    jvm_column,
    resolve_field,
)
from sparklog.schemas.model import (
    KEY_SCHEMA_ID_HEADER,
    VALUE_SCHEMA_ID_HEADER,
    RegisteredSchema,
)
from sparklog.schemas.source import SchemaSource, open_source

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

TOP_LEVEL_RECORD = "topLevelRecord"
_RAW = "__sparklog_framed"
_WHICH = "__sparklog_which"


def spark_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type whose Arrow form (as PySpark converts it) is ``arrow_type``."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type, prefer_timestamp_ntz=True)


def nullable(dt: DataType) -> DataType:
    """``dt`` with every field, element and map value nullable: a typed column's type.
    Both decoders give it so (Spark's ``from_avro`` makes every field nullable in its
    PERMISSIVE mode, which ``jvm_decode`` needs to name an undecodable record)."""
    if isinstance(dt, StructType):
        return StructType([StructField(f.name, nullable(f.dataType), True) for f in dt.fields])
    if isinstance(dt, ArrayType):
        return ArrayType(nullable(dt.elementType), True)
    if isinstance(dt, MapType):
        return MapType(dt.keyType, nullable(dt.valueType), True)
    return dt


def read_schema(include_headers: bool, decoding: Decoding | None) -> StructType:
    """The columns of a ``format("sparklog")`` read: the Kafka source's, with ``key`` and
    ``value`` typed by ``decoding``, then ``headers`` (``includeHeaders``), then
    ``Decoding.extra_fields``."""
    typed = {t.field: t for t in decoding.fields} if decoding else {}

    def column(name: str) -> StructField:
        t = typed.get(name)
        if t is None or t.jvm_writers:  # binary, or payloads the JVM decodes (jvm_decode)
            return StructField(name, BinaryType(), True)
        return StructField(name, nullable(spark_type(t.node().type)), True)

    fields = [
        column("key"),
        column("value"),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    for f in decoding.extra_fields() if decoding else []:
        fields.append(StructField(f.name, spark_type(f.type), True))
    return StructType(fields)


# ---------------------------------------------------------------------------- Spark → Avro


def _min_bytes(precision: int) -> int:
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


def avro_for(dt: DataType, *, record: str = TOP_LEVEL_RECORD, namespace: str = "") -> Any:
    """The Avro schema (JSON-ready) of Spark type ``dt`` (module docstring)."""
    if isinstance(dt, StructType):
        child_ns = f"{namespace}.{record}" if namespace else record
        fields = []
        for f in dt.fields:
            t = avro_for(f.dataType, record=f.name, namespace=child_ns)
            if f.nullable and not isinstance(f.dataType, NullType):
                fields.append({"name": f.name, "type": ["null", t], "default": None})
            else:
                fields.append({"name": f.name, "type": t})
        out: dict[str, Any] = {"type": "record", "name": record}
        if namespace:
            out["namespace"] = namespace
        return {**out, "fields": fields}
    if isinstance(dt, ArrayType):
        items = avro_for(dt.elementType, record=record, namespace=namespace)
        return {"type": "array", "items": ["null", items] if dt.containsNull else items}
    if isinstance(dt, MapType):
        if not isinstance(dt.keyType, StringType):
            raise OptionError(f"Avro maps have string keys; {dt.simpleString()} has not")
        values = avro_for(dt.valueType, record=record, namespace=namespace)
        return {"type": "map", "values": ["null", values] if dt.valueContainsNull else values}
    if isinstance(dt, DecimalType):
        name = f"{namespace}.{record}.fixed" if namespace else f"{record}.fixed"
        return {
            "type": "fixed",
            "name": name,
            "size": _min_bytes(dt.precision),
            "logicalType": "decimal",
            "precision": dt.precision,
            "scale": dt.scale,
        }
    simple: list[tuple[type, Any]] = [
        (BooleanType, "boolean"),
        (ByteType, "int"),
        (ShortType, "int"),
        (IntegerType, "int"),
        (LongType, "long"),
        (FloatType, "float"),
        (DoubleType, "double"),
        (StringType, "string"),
        (BinaryType, "bytes"),
        (NullType, "null"),
        (DateType, {"type": "int", "logicalType": "date"}),
        (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
        (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
    ]
    for cls, avro in simple:
        if isinstance(dt, cls):
            return avro
    raise OptionError(f"Spark type {dt.simpleString()} has no Avro form")


def _shape(dt: DataType) -> DataType:
    """``dt`` with every nullability set (to compare types, nullability aside), and the
    integer types Avro writes as int made int."""
    if isinstance(dt, StructType):
        return StructType([StructField(f.name, _shape(f.dataType)) for f in dt.fields])
    if isinstance(dt, ArrayType):
        return ArrayType(_shape(dt.elementType))
    if isinstance(dt, MapType):
        return MapType(_shape(dt.keyType), _shape(dt.valueType))
    if isinstance(dt, ByteType | ShortType):
        return IntegerType()
    return dt


def check_struct(column: str, given: DataType, expected: DataType, schema: str) -> None:
    """OptionError naming the first field where the DataFrame's ``given`` type differs
    from ``expected`` (the Spark type of ``schema``, a description); nullability aside."""

    def walk(path: str, g: DataType, e: DataType) -> None:
        if isinstance(g, StructType) and isinstance(e, StructType):
            gf = {f.name: f.dataType for f in g.fields}
            ef = {f.name: f.dataType for f in e.fields}
            for name in ef:
                if name not in gf:
                    raise OptionError(
                        f"{column}: field {path}{name} of {schema} is missing from the DataFrame"
                    )
            for name in gf:
                if name not in ef:
                    raise OptionError(
                        f"{column}: the DataFrame's field {path}{name} is not in {schema}"
                    )
                walk(f"{path}{name}.", gf[name], ef[name])
            return
        if _shape(g) != _shape(e):
            where = f"field {path[:-1]}" if path else "the column"
            raise OptionError(
                f"{column}: {where} is {g.simpleString()} in the DataFrame but "
                f"{e.simpleString()} in {schema}"
            )

    walk("", given, expected)


# ---------------------------------------------------------------------------- writing


def encoding_for(
    source: SchemaSource,
    field: str,
    subject: str,
    version: int | None,
    given: DataType,
    *,
    auto_register: bool,
) -> AvroEncoding:
    """How a sink writes ``field`` (of Spark type ``given``) as registry-framed Avro:
    with ``auto_register``, the schema ``avro_for(given)`` registered under ``subject``
    (the registry's compatibility check decides; the same schema again is the same id);
    else version ``version`` (None: the latest) of ``subject``, which ``given`` must match.
    ``OptionError`` says what does not fit."""
    if auto_register:
        schema = json.dumps(avro_for(given))
        try:
            sid = source.register(subject, schema)
            registered = source.by_id(sid)
        except SchemaRegistryError as e:
            raise OptionError(
                f"{field}: registering the DataFrame's schema under subject {subject!r}: {e}"
            ) from None
        return AvroEncoding(field, subject, registered)
    typed = resolve_field(source, field, "avro", subject, version)
    expected = spark_type(typed.node().type)
    what = f"subject {subject!r} version {typed.version} (schema id {typed.reader.id})"
    check_struct(field, given, expected, what)
    return AvroEncoding(field, subject, typed.reader, typed.references)


# ---------------------------------------------------------------------------- the JVM


def avro_in_jvm(spark: Any) -> bool:
    """Whether ``spark`` has Spark's Avro functions (the spark-avro jar; a Spark Connect
    session has no JVM here, so no)."""
    from sparklog.jars import has_jvm_class

    return has_jvm_class(spark, "org.apache.spark.sql.avro.AvroDataToCatalyst")


def writer_ids(source: SchemaSource, subject: str, upto: int) -> tuple[int, ...]:
    """The ids of the live versions of ``subject`` up to version ``upto``, once each."""
    return tuple(s.id for s in _writers(source, subject, upto))


def _writers(source: SchemaSource, subject: str, upto: int) -> list[Any]:
    """Every live version's schema of ``subject`` up to ``upto``, one per schema id."""
    out: dict[int, Any] = {}
    for v in range(1, upto + 1):
        try:
            s = source.version(subject, v).schema
        except SchemaRegistryError:  # deleted
            continue
        out.setdefault(s.id, s)
    return list(out.values())


def _json(schema: Any, source: SchemaSource) -> str:
    """A registered Avro schema, self-contained (its references inlined), for the JVM."""
    return json.dumps(avro_schema(schema, source.referenced(schema), decoding=False))


#: a field added to a record reader schema for the JVM (``_decoded``)
DECODED = "__sparklog_decoded"


def jvm_decodable(typed: TypedField) -> bool:
    """Whether the JVM can tell an undecodable payload of ``typed``'s reader apart from a
    decoded value (``_decoded``): a record (its ``DECODED`` field), or a type that is
    neither a union nor made a struct by Spark (a datum of it is never null). A union
    reader (a nullable type, or Spark's struct of members) is decoded in Python: a null
    datum and an undecodable payload would look alike."""
    reader = json.loads(typed.reader.schema)
    if isinstance(reader, dict) and reader.get("type") in ("record", "error"):
        return True
    if isinstance(reader, list):
        return False
    return not isinstance(spark_type(typed.node().type), StructType)


def _decoded(
    payload: Column,
    which: Column,
    writers: list[Any],
    reader: RegisteredSchema,
    source: SchemaSource,
) -> tuple[Column, bool]:
    """``CASE which WHEN <id> THEN from_avro(payload, <writer schema>) ...``, each writer
    schema resolved to ``reader`` (option ``avroSchema``), and whether the reader is a
    record. Spark's PERMISSIVE mode makes an undecodable payload a struct of nulls (a
    null for other types), which a record may also decode to; so a record reader gets one
    more field, ``DECODED`` (boolean, default true), which every decoded row has and an
    undecodable one has not (``_settle`` drops it again)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    expanded = avro_schema(reader, source.referenced(reader), decoding=False)
    record = isinstance(expanded, dict) and expanded.get("type") in ("record", "error")
    if record:
        mark = {"name": DECODED, "type": "boolean", "default": True}
        expanded = {**expanded, "fields": [*expanded["fields"], mark]}
    options = {"avroSchema": json.dumps(expanded), "mode": "PERMISSIVE"}
    out: Column | None = None
    for w in writers:
        body = from_avro(payload, _json(w, source), options)
        hit = which == F.lit(w.id)
        out = F.when(hit, body) if out is None else out.when(hit, body)
    if out is None:
        raise OptionError("no writer schema to decode with")
    return out, record


def _where(df: DataFrame) -> Column | None:
    """``<topic>-<partition> offset <offset>`` of a row, if ``df`` has those columns."""
    from pyspark.sql import functions as F

    if not {"topic", "partition", "offset"} <= set(df.columns):
        return None
    return F.concat(
        F.col("topic"),
        F.lit("-"),
        F.col("partition").cast("string"),
        F.lit(" offset "),
        F.col("offset").cast("string"),
    )


def _settle(
    df: DataFrame,
    column: str,
    decoded: Column,
    record: bool,
    tried: Column,
    why: Column,
    fail: bool,
    errors: Column | None = None,
) -> DataFrame:
    """``df`` with ``column`` set to ``decoded`` (``_decoded``): a row where decoding was
    ``tried`` but failed fails the query with ``why``, or (not ``fail``) is null and says
    ``why`` in ``<column>DecodeError`` (after ``errors``, the reasons known before the JVM
    decoded). The decoded column is read twice but decoded once: Spark does not inline an
    expensive expression into two places."""
    from pyspark.sql import functions as F

    df = df.withColumn(column, decoded)
    got = F.col(column)
    failed = tried & (got[DECODED].isNull() if record else got.isNull())
    value = got.dropFields(DECODED) if record else got
    # neither branch casts a null to the value's type: Spark 4.2 refuses a cast to TIME
    # (Avro's time-micros) while spark.sql.timeType.enabled is off, as it is by default
    if fail:
        ok = F.when(failed, F.raise_error(why)).otherwise(F.lit(True))
        return df.withColumn(column, F.when(ok, value))
    reason = F.when(failed, why)
    if errors is not None:
        reason = F.coalesce(errors, reason)
    df = df.withColumn(f"{column}DecodeError", reason)
    return df.withColumn(column, F.when(~failed, value))


def jvm_decode(df: DataFrame, decoding: Decoding) -> DataFrame:
    """A ``format("sparklog")`` read's typed fields decoded in the JVM: each field with
    ``TypedField.jvm_writers`` holds Avro payloads (unframed by the reader, which also
    says in ``codec.jvm_column(field)`` which writer schema each is written with) and
    becomes the reader schema's struct, with Spark's ``from_avro`` per writer schema. A
    payload none can decode fails the query naming topic, partition and offset, or with
    ``failOnDecodeError=false`` is null with its reason. The hidden columns are dropped."""
    from pyspark.sql import functions as F

    source = decoding.source
    where = _where(df)
    for t in decoding.fields:
        if not t.jvm_writers:
            continue
        which = F.col(jvm_column(t.field))
        writers = [source.by_id(i) for i in t.jvm_writers]
        decoded, record = _decoded(F.col(t.field), which, writers, t.reader, source)
        why = F.concat(
            F.lit(
                f"cannot decode the {t.field} with subject {t.subject!r} version "
                f"{t.version}: schema id "
            ),
            F.col(f"{t.field}SchemaId").cast("string"),
            F.lit(
                ": the payload does not fit its schema"
                + (" (failOnDecodeError=false reads it as null)" if decoding.fail_on_error else "")
            ),
        )
        if where is not None:
            why = F.concat(where, F.lit(": "), why)
        errors = None if decoding.fail_on_error else F.col(f"{t.field}DecodeError")
        df = _settle(
            df, t.field, decoded, record, which.isNotNull(), why, decoding.fail_on_error, errors
        )
        df = df.drop(jvm_column(t.field))
    return df


def from_registry(
    df: DataFrame,
    column: str = "value",
    *,
    schema_registry_url: str | None = None,
    storage_path: str | None = None,
    subject: str,
    version: int | None = None,
    fail_on_error: bool = True,
    schema_registry_ca_file: str | None = None,
) -> DataFrame:
    """``df`` with ``column`` (binary, registry-framed Avro) decoded in the JVM into the
    Spark type of version ``version`` (None: the latest now) of ``subject``, and
    ``<column>SchemaId`` (int) added; with ``fail_on_error=False``, undecodable records
    are null and ``<column>DecodeError`` says why. Schemas come from the registry at
    ``schema_registry_url``, or from the ``_schemas`` topic of the storage root
    ``storage_path``; an https registry is verified with ``schema_registry_ca_file``
    (default: the system's CAs). See the module docstring."""
    from pyspark.sql import functions as F

    source = open_source(schema_registry_url, storage_path, ssl_cafile=schema_registry_ca_file)
    field = "key" if column == "key" else "value"
    typed: TypedField = resolve_field(source, field, "avro", subject, version)
    if not jvm_decodable(typed):
        raise OptionError(
            f"from_registry: version {typed.version} of subject {subject!r} is a union; the "
            "JVM cannot tell its null from an undecodable record: read it with "
            'format("sparklog").option("valueFormat", "avro") (decoded in Python)'
        )
    writers = _writers(source, subject, source.latest(subject).version)
    if not writers:
        raise OptionError(f"subject {subject!r} has no live version")
    df = df.withColumn(_RAW, F.col(column).cast("binary"))
    raw = F.col(_RAW)
    framed = (F.substring(raw, 1, 1) == F.lit(b"\x00")) & (F.length(raw) >= 5)
    # long: an id above 2^31 - 1 (foreign bytes) must not fail an ANSI cast
    sid = F.when(framed, F.conv(F.hex(F.substring(raw, 2, 4)), 16, 10).cast("long"))
    payload = F.expr(f"substr({_RAW}, 6)")
    known = F.lit(None).cast("int")
    for w in writers:
        known = F.when(sid == F.lit(w.id), F.lit(w.id)).otherwise(known)
    unknown_guid = F.lit(False)
    if "headers" in df.columns:  # a schema GUID in a header wins over a prefix
        name = KEY_SCHEMA_ID_HEADER if field == "key" else VALUE_SCHEMA_ID_HEADER
        h = F.filter("headers", lambda x: x["key"] == F.lit(name))
        guid = F.when(F.size(h) > 0, F.element_at(h, 1)["value"])
        by_guid = F.lit(None).cast("int")
        for w in writers:
            if w.guid:
                hit = guid == F.lit(b"\x01" + uuid.UUID(w.guid).bytes)
                by_guid = F.when(hit, F.lit(w.id)).otherwise(by_guid)
        known = F.when(guid.isNotNull(), by_guid).otherwise(known)
        payload = F.when(guid.isNotNull(), raw).otherwise(payload)
        unknown_guid = guid.isNotNull()
    df = df.withColumn(_WHICH, known).withColumn(f"{column}SchemaId", F.col(_WHICH))
    decoded, record = _decoded(payload, F.col(_WHICH), writers, typed.reader, source)
    why = F.concat(
        F.lit(f"cannot decode the {column} with subject {subject!r}: "),
        F.when(
            F.col(_WHICH).isNull() & unknown_guid,
            F.lit("the schema GUID in its header is not a version of the subject"),
        )
        .when(
            F.col(_WHICH).isNull() & sid.isNotNull(),
            F.concat(
                F.lit("schema id "), sid.cast("string"), F.lit(" is not a version of the subject")
            ),
        )
        .when(F.col(_WHICH).isNull(), F.lit("no schema id (magic byte 0 + id)"))
        .otherwise(
            F.concat(
                F.lit("schema id "),
                F.col(_WHICH).cast("string"),
                F.lit(": the payload does not fit its schema"),
            )
        ),
    )
    where = _where(df)
    if where is not None:
        why = F.concat(where, F.lit(": "), why)
    # a payload of no known schema is "tried" too (its CASE has no branch: null)
    df = _settle(df, column, decoded, record, raw.isNotNull(), why, fail_on_error)
    return df.drop(_RAW, _WHICH)
