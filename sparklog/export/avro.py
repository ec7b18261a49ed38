"""``--decode avro``: Avro-encoded values as typed columns, decoded by Spark's own Avro code.

Spark's ``from_avro`` lives in the spark-avro module, which pyspark does not ship; the
project fetches it with Maven (``jvm/spark/pom.xml``) and then ``from_avro`` decodes. The
Avro *file* format, with Spark's Avro deserializer, is inside spark-sql. So where
``from_avro`` is missing (a session with pyspark's jars alone), the values are wrapped
into Avro container files and read back with the file format:

- An Avro record is the concatenation of its fields' encodings, so a record of the
  *wrapper* schema ``{key, topic, partition, offset, timestamp, timestampType, value}``,
  whose ``value`` is the union ``[null, <writer schema>]``, is built by prefixing the
  encoded Kafka columns to the value's bytes untouched (a tombstone is branch 0, null).
  Python only concatenates bytes; it decodes nothing.
- Spark tasks (``mapInArrow``) write one container file (codec null) per task into a
  scratch directory under the storage root, ``.export-tmp-<run id>/``; Spark's Avro reader
  then decodes every field with the same type mapping ``from_avro`` uses. The scratch
  directory is removed when the export ends (a killed run's is removed by the next export
  after a day).

Values framed by a schema registry (Confluent's 5-byte magic + schema id prefix) are not
plain Avro datums; strip the prefix before exporting, or use ``from_avro`` on a cluster
with spark-avro.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from sparklog.storage import names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

AVRO_FORMAT = "org.apache.spark.sql.avro.AvroFileFormat"  # "avro" needs spark-avro loaded
_MAGIC = b"Obj\x01"
_STALE_S = 24 * 3600


def has_from_avro(spark: SparkSession) -> bool:
    """Whether spark-avro (and so ``from_avro``) is on the session's classpath."""
    from sparklog.schemas.spark import avro_in_jvm

    return avro_in_jvm(spark)


def _long(n: int) -> bytes:
    """Avro's zig-zag varint encoding of an int or long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(b: bytes) -> bytes:
    return _long(len(b)) + b


def wrapper_schema(writer_schema: str) -> str:
    """The Avro schema of one exported row, the value being the writer's schema."""
    try:
        value = json.loads(writer_schema)
    except ValueError as e:
        raise ValueError(f"the Avro schema is not JSON: {e}") from None
    fields = [
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "timestampType", "type": "int"},
        {"name": "value", "type": ["null", value]},
    ]
    return json.dumps(
        {
            "type": "record",
            "name": "SparklogExportRow",
            "namespace": "sparklog.export",
            "fields": fields,
        }
    )


def container(schema: str, datums: list[bytes]) -> bytes:
    """An Avro object container file (codec null) holding ``datums`` in one block."""
    sync = uuid.uuid4().bytes
    meta = [(b"avro.schema", schema.encode()), (b"avro.codec", b"null")]
    header = _MAGIC + _long(len(meta))
    for k, v in meta:
        header += _bytes(k) + _bytes(v)
    header += _long(0) + sync
    if not datums:
        return header
    body = b"".join(datums)
    return header + _long(len(datums)) + _long(len(body)) + body + sync


def encode_rows(batch: pa.RecordBatch) -> list[bytes]:
    """Wrapper-schema datums of a batch in the Kafka columns (see the module docstring)."""
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()  # micros since the epoch
    rows = zip(
        batch.column("key").to_pylist(),
        batch.column("topic").to_pylist(),
        batch.column("partition").to_pylist(),
        batch.column("offset").to_pylist(),
        ts,
        batch.column("timestampType").to_pylist(),
        batch.column("value").to_pylist(),
        strict=True,
    )
    out = []
    for key, topic, part, offset, t, tt, value in rows:
        head = b"\x00" if key is None else b"\x02" + _bytes(key)
        head += _bytes(topic.encode()) + _long(part) + _long(offset) + _long(t) + _long(tt)
        out.append(head + (b"\x00" if value is None else b"\x02" + value))
    return out


def _scratch(root: str) -> str:
    """A fresh scratch directory under ``root``; stale ones of killed runs are removed."""
    now = time.time()
    if os.path.isdir(root):
        for name in os.listdir(root):
            if not name.startswith(names.EXPORT_SCRATCH_PREFIX):
                continue
            path = os.path.join(root, name)
            if now - os.path.getmtime(path) > _STALE_S:
                shutil.rmtree(path, ignore_errors=True)
    path = os.path.join(root, f"{names.EXPORT_SCRATCH_PREFIX}{uuid.uuid4().hex[:16]}")
    os.makedirs(path)
    return path


@dataclass
class _Written(WriterCommitMessage):
    path: str
    rows: int


class _ContainerWriter(DataSourceArrowWriter):
    """Each task writes its rows as one container file of wrapper-schema datums."""

    def __init__(self, directory: str, schema: str) -> None:
        self.directory, self.schema = directory, schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        datums: list[bytes] = []
        for batch in iterator:
            datums += encode_rows(batch)
        path = os.path.join(self.directory, f"part-{uuid.uuid4().hex}.avro")
        with open(path, "wb") as f:
            f.write(container(self.schema, datums))
        return _Written(path, len(datums))


class ContainerFileSink(DataSource):
    """Internal: ``df.write.format("sparklog-avro-scratch")`` writes container files (an
    Arrow writer: no pandas, no per-row objects on the Spark side)."""

    @classmethod
    def name(cls) -> str:
        return "sparklog-avro-scratch"

    def writer(self, schema: Any, overwrite: bool) -> _ContainerWriter:
        return _ContainerWriter(self.options["path"], self.options["schema"])


def decode_via_files(
    spark: SparkSession, df: DataFrame, writer_schema: str, root: str, scratch: list[str]
) -> DataFrame:
    """``df`` (the Kafka columns) read back from container files with ``value`` decoded
    (see the module docstring). The scratch directory is appended to ``scratch`` for the
    caller to remove once the export has written its output. A bad schema raises
    ValueError before any record is touched."""
    schema = wrapper_schema(writer_schema)
    where = _scratch(root)
    scratch.append(where)
    empty = os.path.join(where, "schema.avro")
    with open(empty, "wb") as f:
        f.write(container(schema, []))
    try:  # Spark parses the schema here: a bad one fails now, before any task runs
        spark.read.format(AVRO_FORMAT).load(empty).schema  # noqa: B018
    except Exception as e:
        first = str(e).strip().splitlines()[0][:300]
        raise ValueError(f"Spark cannot use the Avro schema: {first}") from None

    spark.dataSource.register(ContainerFileSink)
    cols = ["key", "topic", "partition", "offset", "timestamp", "timestampType", "value"]
    (
        df.select(*cols)
        .write.format(ContainerFileSink.name())
        .option("path", where)
        .option("schema", schema)
        .mode("append")
        .save()
    )
    decoded: DataFrame = spark.read.format(AVRO_FORMAT).load(where)
    return decoded
