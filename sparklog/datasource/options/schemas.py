"""The typed-column options of ``format("sparklog")``, reads and writes
(``schema_options``; docs/schemas-spark.md):

- ``valueFormat`` / ``keyFormat``: ``binary`` (default: the bytes as stored), ``avro`` or
  ``json`` (registry-framed: a schema id before the payload or in a header);
- ``schemaRegistryUrl``: a Confluent-compatible registry (``http[s]://[user:password@]host:
  port``); without it, schemas are read from the storage root's own ``_schemas`` topic;
- ``schemaRegistryCaFile``: the CA bundle (PEM) an https registry is verified with
  (default: the system's; writes: else the sink's ``kafka.ssl`` trust store);
- ``valueSubject`` / ``keySubject``: the subject of the reader (writer) schema; default
  ``<topic>-value`` / ``<topic>-key`` (TopicNameStrategy), which needs a single topic;
- ``valueSchemaVersion`` / ``keySchemaVersion``: the reader schema's version (default: the
  subject's latest when the query starts, fixed for the query);
- ``failOnDecodeError`` (reads, default true): an undecodable record fails the query,
  naming topic, partition and offset; false: its column is null and ``valueDecodeError`` /
  ``keyDecodeError`` says why;
- ``decodeIn`` (reads of Avro): ``auto`` (default: ``jvm`` where Spark has spark-avro,
  else ``python``), ``jvm`` (Spark's ``from_avro`` per writer schema, planned when the
  query starts; ``sparklog.schemas.spark.jvm_decode``) or ``python`` (fastavro in the
  reader);
- ``autoRegisterSchemas`` (writes, default false): register the Avro schema derived from
  the column's Spark type under the subject; otherwise the subject's latest schema (or
  ``valueSchemaVersion``) is used, and the column must match it. Writes without
  ``schemaRegistryUrl`` use the broker's own registry (its ``confluent.schema.registry.url``).

``_sparklog.jvm`` is not for users: the driver (``sparklog.datasource.driver``) passes the
JVM's decoding plan to the source with it (``jvm_plan``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.errors import OptionError

FORMATS = ("binary", "avro", "json")
DECODE_IN = ("auto", "jvm", "python")
#: the driver's decoding plan for the JVM (module docstring), lower-cased
JVM_PLAN_OPTION = "_sparklog.jvm"
#: the typed-column options of reads and writes alike (lower-cased)
_TYPED_OPTIONS = frozenset(
    {
        "valueformat",
        "keyformat",
        "schemaregistryurl",
        "schemaregistrycafile",
        "valuesubject",
        "keysubject",
        "valueschemaversion",
        "keyschemaversion",
    }
)
#: the typed-column options of writes
WRITE_SCHEMA_OPTIONS = _TYPED_OPTIONS | {"autoregisterschemas"}
#: the typed-column options of reads
SCHEMA_OPTIONS = _TYPED_OPTIONS | {"failondecodeerror", "decodein", JVM_PLAN_OPTION}


@dataclass(frozen=True)
class TypedColumn:
    """``key`` or ``value`` in ``format`` (avro, json) with the schema of ``subject``,
    version ``version`` (None: the latest when the query starts)."""

    field: str
    format: str
    subject: str
    version: int | None = None


@dataclass(frozen=True)
class SchemaOptions:
    """The typed-column options (module docstring); ``url`` None: the storage root's
    ``_schemas`` topic."""

    url: str | None
    columns: tuple[TypedColumn, ...]
    fail_on_decode_error: bool = True
    auto_register: bool = False
    decode_in: str = "auto"
    #: ``JVM_PLAN_OPTION``: per field decoded in the JVM, its reader version and the ids
    #: of the writer schemas the plan decodes
    jvm_plan: Mapping[str, tuple[int, tuple[int, ...]]] | None = None
    #: ``schemaRegistryCaFile``: the CA bundle (PEM) an https ``url`` is verified with
    ca_file: str | None = None


def schema_options(
    opts: Mapping[str, str], topics: tuple[str, ...] | None, where: str, *, write: bool = False
) -> SchemaOptions | None:
    """The typed-column options of lower-cased ``opts`` (None: every column binary).
    ``topics`` are the topics a default subject may be named after (None or several: a
    subject must be given); ``where`` names them in errors (``subscribePattern=...``)."""
    columns = []
    for field in ("value", "key"):
        fmt = opts.get(f"{field}format", "binary").strip().lower()
        if fmt not in FORMATS:
            raise OptionError(
                f"option {field}Format must be one of {', '.join(FORMATS)}, got {fmt!r}"
            )
        subject = opts.get(f"{field}subject", "").strip() or None
        raw_version = opts.get(f"{field}schemaversion", "").strip().lower()
        if fmt == "binary":
            for name in (f"{field}Subject", f"{field}SchemaVersion"):
                if name.lower() in opts:
                    raise OptionError(f"option {name} needs {field}Format=avro or json")
            continue
        if write and fmt != "avro":
            raise OptionError(f"option {field}Format: the sparklog sink writes avro, not {fmt}")
        if subject is None:
            if not topics or len(topics) != 1:
                raise OptionError(
                    f"{field}Format={fmt} over {where} needs the option {field}Subject: the "
                    f"default subject <topic>-{field} (TopicNameStrategy) names one topic's "
                    "schema"
                )
            subject = f"{topics[0]}-{field}"
        version = None
        if raw_version not in ("", "latest"):
            try:
                version = int(raw_version)
            except ValueError:
                version = 0
            if version < 1:
                raise OptionError(
                    f"option {field}SchemaVersion must be a version >= 1 or latest, got "
                    f"{opts[f'{field}schemaversion']!r}"
                )
        columns.append(TypedColumn(field, fmt, subject, version))
    url = opts.get("schemaregistryurl", "").strip() or None
    auto = bool_option("autoRegisterSchemas", opts.get("autoregisterschemas", "false"))
    if not columns:
        given = [
            n
            for n in (
                "schemaRegistryUrl",
                "failOnDecodeError",
                "autoRegisterSchemas",
                "decodeIn",
                "schemaRegistryCaFile",
            )
            if n.lower() in opts
        ]
        if given:
            raise OptionError(f"option {given[0]} needs valueFormat or keyFormat avro or json")
        return None
    fail = bool_option("failOnDecodeError", opts.get("failondecodeerror", "true"))
    decode_in = opts.get("decodein", "auto").strip().lower()
    if decode_in not in DECODE_IN:
        raise OptionError(
            f"option decodeIn must be one of {', '.join(DECODE_IN)}, got {opts['decodein']!r}"
        )
    ca_file = opts.get("schemaregistrycafile", "").strip() or None
    if ca_file is not None:
        if (url is None and not write) or (url and not url.lower().startswith("https://")):
            raise OptionError("option schemaRegistryCaFile needs an https:// schemaRegistryUrl")
        if not os.path.isfile(ca_file):
            raise OptionError(f"option schemaRegistryCaFile: no such file {ca_file!r}")
    return SchemaOptions(url, tuple(columns), fail, auto, decode_in, _jvm_plan(opts), ca_file)


def jvm_plan_option(plan: Mapping[str, tuple[int, tuple[int, ...]]]) -> str:
    """``JVM_PLAN_OPTION``'s value: ``{"value": [version, [writer ids]], ...}``."""
    return json.dumps({f: [v, list(ids)] for f, (v, ids) in plan.items()})


def _jvm_plan(opts: Mapping[str, str]) -> dict[str, tuple[int, tuple[int, ...]]] | None:
    raw = opts.get(JVM_PLAN_OPTION)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return {str(f): (int(v), tuple(int(i) for i in ids)) for f, (v, ids) in doc.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise OptionError(f"option {JVM_PLAN_OPTION} is the driver's, not valid: {e}") from None


def bool_option(name: str, raw: str) -> bool:
    """Option ``name``'s ``true`` or ``false`` (any case); anything else is refused."""
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"
