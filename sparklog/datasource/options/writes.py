"""The write options of ``format("sparklog")`` (``df.write`` and ``writeStream``): the
names of Spark's Kafka sink, checked on the driver before any task runs, with the
DataFrame's columns (``check_schema``). The result, ``WriteOptions``, is plain data that
Spark pickles to the write tasks (``sparklog.datasource.writer``).

``topic`` (or a ``topic`` column), ``kafka.bootstrap.servers`` and Kafka's security
options (``options.kafka``), ``kafka.batch.size``, ``kafka.transactional.id``,
``checkpointLocation`` (where a stream's sink keeps its state), and the typed-column
options (``options.schemas``); other ``kafka.*`` producer settings are accepted and
ignored, as documented in ``sparklog.datasource.writer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from sparklog.datasource.options.kafka import client_settings
from sparklog.datasource.options.schemas import (
    WRITE_SCHEMA_OPTIONS,
    SchemaOptions,
    schema_options,
)
from sparklog.datasource.producer import MAX_BATCH_BYTES
from sparklog.datasource.sink_state import STATE_DIR
from sparklog.errors import OptionError
from sparklog.kafka.client import ClientSettings
from sparklog.schemas.codec import AvroEncoding
from sparklog.storage import names
from sparklog.storage.store import filesystem_for

SINK_TIMEOUT_S = 60.0  # a produce waits for the fsync of everything before it
_KNOWN = {"topic", "kafka.bootstrap.servers", "checkpointlocation", "queryname"}


@dataclass(frozen=True)
class WriteOptions:
    """What a write task needs: plain data, pickled to executors."""

    client: ClientSettings
    topic: str | None
    state_dir: str | None
    batch_bytes: int = MAX_BATCH_BYTES
    #: ``kafka.transactional.id``: each task writes in transactions (module docstring)
    transactional_id: str | None = None
    #: typed keys and values, written as registry-framed Avro (module docstring)
    encodings: tuple[AvroEncoding, ...] = ()


def _type_name(t: Any) -> str:
    return str(t.simpleString()) if hasattr(t, "simpleString") else str(t)


def check_schema(
    schema: StructType, topic_option: str | None, typed: frozenset[str] = frozenset()
) -> None:
    """The Kafka sink's column rules, checked on the driver before any task runs; the
    ``typed`` columns (``key``, ``value``) are encoded, so they may be of any type."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the sparklog sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in typed:
            continue
        if name in fields and not isinstance(fields[name], StringType | BinaryType):
            raise OptionError(
                f"column {name!r} must be string or binary, not {_type_name(fields[name])}"
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"column 'topic' must be string, not {_type_name(fields['topic'])}")
    if "topic" not in fields and topic_option is None:
        raise OptionError("the sparklog sink needs the option topic or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"column 'partition' must be int, not {_type_name(fields['partition'])}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise OptionError(
                "column 'headers' must be array<struct<key: string, value: binary>>, not "
                + _type_name(h)
            )


def write_options(options: Mapping[str, str], schema: StructType) -> WriteOptions:
    opts = {k.lower(): str(v) for k, v in options.items()}
    unknown = sorted(
        k
        for k in opts
        if k not in _KNOWN and k not in WRITE_SCHEMA_OPTIONS and not k.startswith("kafka.")
    )
    if unknown:
        hint = (
            " (the sink writes through the broker: give kafka.bootstrap.servers, not a path)"
            if "path" in unknown
            else ""
        )
        raise OptionError(f"unknown option(s) {unknown} for the sparklog sink{hint}")
    settings = client_settings(opts, "sparklog-sink")
    if settings is None:
        raise OptionError(
            "the sparklog sink needs the option kafka.bootstrap.servers (writes go through "
            "the broker, which assigns offsets)"
        )
    client = settings.with_timeout(SINK_TIMEOUT_S)
    topic = opts.get("topic")
    if topic is not None:
        names.validate_topic_name(topic)
    where = f"topic={topic}" if topic else "the topic column"
    schemas = schema_options(opts, (topic,) if topic else None, where, write=True)
    typed = frozenset(c.field for c in schemas.columns) if schemas else frozenset()
    check_schema(schema, topic, typed)
    try:
        batch_bytes = int(opts.get("kafka.batch.size", MAX_BATCH_BYTES))
    except ValueError:
        raise OptionError("option kafka.batch.size must be an integer (bytes)") from None
    if not 1 <= batch_bytes <= MAX_BATCH_BYTES:
        raise OptionError(f"option kafka.batch.size must be in [1, {MAX_BATCH_BYTES}]")
    state_dir = None
    ck = opts.get("checkpointlocation")
    if ck and "://" in ck and not ck.startswith("file://"):
        state_dir = ck.rstrip("/") + "/" + STATE_DIR
    elif ck:
        fs, path = filesystem_for(ck)  # makes a relative path absolute, here on the driver
        state_dir = fs.join(path, STATE_DIR)
    tid = opts.get("kafka.transactional.id")
    if tid is not None and not tid.strip():
        raise OptionError("option kafka.transactional.id must not be empty")
    encodings = _encodings(schemas, schema, client) if schemas else ()
    return WriteOptions(client, topic, state_dir, batch_bytes, tid, encodings)


def _encodings(
    schemas: SchemaOptions, schema: StructType, client: ClientSettings
) -> tuple[AvroEncoding, ...]:
    """How each typed column is written (on the driver; module docstring). Without
    ``schemaRegistryUrl``, the registry the broker serves, with the sink's SASL user as
    basic credentials (the registry checks the broker's users)."""
    from sparklog.schemas.source import HttpSchemaSource
    from sparklog.schemas.spark import encoding_for

    url = schemas.url
    auth = None
    if url is None:
        from sparklog.kafka import admin
        from sparklog.kafka.client import KafkaClient
        from sparklog.schemas.model import REGISTRY_URL_CONFIG

        with KafkaClient(client) as kafka:
            url = admin.broker_configs(kafka, [REGISTRY_URL_CONFIG]).get(REGISTRY_URL_CONFIG)
        if not url:
            raise OptionError(
                "valueFormat/keyFormat avro: the broker serves no schema registry "
                "(confluent.schema.registry.url); give the option schemaRegistryUrl"
            )
        if client.sasl_username and client.sasl_password is not None:
            auth = f"{client.sasl_username}:{client.sasl_password}"
    source = HttpSchemaSource(url, basic_auth=auth, ssl_cafile=schemas.ca_file or client.ssl_cafile)
    types = {f.name.lower(): f.dataType for f in schema.fields}
    for c in schemas.columns:
        if c.field not in types:
            raise OptionError(f"option {c.field}Format={c.format} needs a {c.field!r} column")
    return tuple(
        encoding_for(
            source,
            c.field,
            c.subject,
            c.version,
            types[c.field],
            auto_register=schemas.auto_register,
        )
        for c in schemas.columns
    )
