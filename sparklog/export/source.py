"""What an export reads: per-partition offset ranges, as a DataFrame in the Kafka columns.

``plan`` resolves the topic's partitions and offset ranges with the DataSource's own read
planner and option rules (``startingOffsets``, ``startingTimestamp``, ``endingOffsets``;
offsets removed by retention fail the export, naming them). Each range is split where the
sealed segments end: the sealed part is plain Parquet and is read by Spark's own vectorised
Parquet reader (``spark.read.parquet`` over the segment files the manifest names, filtered
to the range); the rest (rolled and active ``.arrow`` segments) goes through
``format("sparklog")``. The files a plan names stay on disk for ``file.delete.delay.ms``
after a compaction or retention swaps them out, so an export shorter than that reads a
consistent version. On a root on S3 (``s3://``) Spark reads the files through its S3A
connector (``s3a://`` paths; hadoop-aws on its classpath, its ``fs.s3a.*`` settings); a
session without it reads them through ``format("sparklog")`` instead, as ``--reader
python`` does.

Transactions: an export reads committed data only (ranges end at the last stable offset);
on the Parquet path the SQL filter drops control records and the aborted transactions'
records (``PartitionRange.txn_filter``), as ``format("sparklog")`` does on the rest.

``decode`` turns the binary value into typed columns with Spark's ``from_json`` /
``from_avro``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.datasource.options.reads import batch_options
from sparklog.datasource.plan import ReadPlanner
from sparklog.errors import ExportUsageError
from sparklog.export.options import ExportOptions
from sparklog.storage.txnindex import has_index

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
#: the class of Spark's S3 connector (hadoop-aws), which reads ``s3a://`` paths
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
#: the column ``--upsert`` adds before decoding: whether the record is a tombstone
DELETED = "__sparklog_deleted"


@dataclass(frozen=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one partition; ``[start, sealed_end)`` lies in the
    sealed segment files ``files``, the rest in ``.arrow`` segments."""

    topic: str
    partition: int
    start: int
    end: int
    sealed_end: int
    files: tuple[str, ...]
    #: the partition has had transactions: ``txn_filter`` is needed
    transactional: bool = False
    #: aborted transactions overlapping the range: (producer id, first, last offset)
    aborted: tuple[tuple[int, int, int], ...] = ()

    @property
    def count(self) -> int:
        return self.end - self.start

    @property
    def txn_filter(self) -> str:
        """SQL over the stored columns: no control records, no aborted records."""
        if not self.transactional:
            return "TRUE"
        parts = ["(attributes IS NULL OR (attributes & 32) = 0)"]
        parts += [
            f"NOT (producer_id = {pid} AND offset BETWEEN {first} AND {last})"
            for pid, first, last in self.aborted
        ]
        return " AND ".join(parts)


def plan(opts: ExportOptions) -> list[PartitionRange]:
    """Every partition's range to export (see the module docstring)."""
    options = batch_options({"path": opts.data_dir, **opts.source_options()})
    planner = ReadPlanner.of(options)
    out = []
    for (topic, p), (start, end, view) in sorted(planner.batch_spans(options).items()):
        files: list[str] = []
        sealed_end = start
        for info in view.manifest.segments:
            if info.next_offset is not None and info.next_offset <= start:
                continue  # wholly before the range
            if not info.sealed or sealed_end >= end:
                break  # the sealed prefix of the range ends here
            assert info.next_offset is not None
            files.append(_spark_path(opts.data_dir, view.fs.join(view.path, info.name)))
            sealed_end = min(info.next_offset, end)
        aborted = tuple(
            (a.producer_id, a.first_offset, a.last_offset)
            for a in view.txn.aborted_between(start, end)
        )
        transactional = bool(view.txn.aborted or view.txn.open_first is not None) or has_index(
            view.fs, view.path
        )
        out.append(
            PartitionRange(
                topic, p, start, end, max(sealed_end, start), tuple(files), transactional, aborted
            )
        )
    return out


def _spark_path(data_dir: str, path: str) -> str:
    """The path Spark's own readers take for ``path`` of the root ``data_dir``: the path
    itself, or ``s3a://<bucket>/<key>`` on S3 (the backend's paths are ``<bucket>/<key>``)."""
    return f"s3a://{path}" if data_dir.startswith("s3://") else path


def _native_reads(spark: SparkSession, data_dir: str) -> bool:
    """Whether Spark's Parquet reader can read the root's files (module docstring)."""
    if not data_dir.startswith("s3://"):
        return True
    from sparklog.jars import has_jvm_class

    return has_jvm_class(spark, S3A_CLASS)


def _native(spark: SparkSession, r: PartitionRange, headers: bool, schema: StructType) -> DataFrame:
    # SQL text rather than Column objects: each Column is a py4j round trip, and a plan over
    # many partitions would spend more time building than a small export takes to run
    # (topic names are [a-zA-Z0-9._-] only: safe in a SQL string literal)
    cols = [
        "key",
        "value",
        f"'{r.topic}' AS topic",
        f"CAST({r.partition} AS INT) AS partition",
        "offset",
        "timestamp",
        "CAST(timestamp_type AS INT) AS timestampType",
    ] + (["headers"] if headers else [])
    return (
        spark.read.schema(schema)
        .parquet(*r.files)
        .where(f"offset >= {r.start} AND offset < {r.sealed_end} AND {r.txn_filter}")
        .selectExpr(*cols)
    )


def read(spark: SparkSession, opts: ExportOptions, ranges: list[PartitionRange]) -> DataFrame:
    """The planned ranges as one DataFrame in the Kafka source's columns."""
    from sparklog.datasource.register import register

    headers = opts.include_headers or opts.decode == "registry"  # registry: ids in headers
    parts: list[DataFrame] = []
    tail: dict[int, tuple[int, int]] = {}
    schema = None  # every sealed segment has the same schema: infer it from one file, once
    native = opts.reader == "native" and _native_reads(spark, opts.data_dir)
    for r in ranges:
        if r.count <= 0:
            continue
        if native and r.files:
            if schema is None or "attributes" not in schema.fieldNames():
                schema = spark.read.parquet(r.files[-1]).schema
            if r.transactional and "attributes" not in schema.fieldNames():
                from pyspark.sql.types import ByteType

                schema = schema.add("attributes", ByteType())
            parts.append(_native(spark, r, headers, schema))
            if r.sealed_end < r.end:
                tail[r.partition] = (r.sealed_end, r.end)
        else:
            tail[r.partition] = (r.start, r.end)
    if tail or not parts:
        if not tail:  # nothing at all to export: an empty frame of the right shape
            first = ranges[0] if ranges else PartitionRange(opts.topic, 0, 0, 0, 0, ())
            tail = {first.partition: (first.start, first.start)}
        register(spark)
        parts.append(
            spark.read.format("sparklog")
            .option("assign", json.dumps({opts.topic: sorted(tail)}))
            .option(
                "startingOffsets",
                json.dumps({opts.topic: {str(p): s for p, (s, _) in tail.items()}}),
            )
            .option(
                "endingOffsets", json.dumps({opts.topic: {str(p): e for p, (_, e) in tail.items()}})
            )
            .option("failOnDataLoss", "true")
            .option("includeHeaders", str(headers).lower())
            .load(opts.data_dir)
            .select(*KAFKA_COLUMNS, *(["headers"] if headers else []))
        )
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def decode(
    spark: SparkSession, df: DataFrame, opts: ExportOptions, scratch: list[str] | None = None
) -> DataFrame:
    """With ``--decode``: the value's fields as columns, beside the Kafka columns (the raw
    value is dropped; a tombstone decodes to nulls). Avro without spark-avro goes through
    container files (``sparklog.export.avro``), whose scratch directories are appended to
    ``scratch`` for the caller to remove after writing."""
    if opts.decode is None:
        return df
    if opts.decode == "registry":
        return _decode_registry(spark, df, opts)
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from sparklog.export import avro

    assert opts.schema is not None
    flagged = DELETED in df.columns
    try:
        if opts.decode == "json":
            parsed = F.from_json(F.col("value").cast("string"), opts.schema)
        elif avro.has_from_avro(spark):
            from pyspark.sql.avro.functions import from_avro

            parsed = from_avro(F.col("value"), opts.schema, {"mode": "FAILFAST"})
        else:
            if df.isStreaming:
                raise ExportUsageError(
                    "--decode avro on an incremental export to files needs Spark's from_avro "
                    "(spark-avro on the classpath); use --format delta, or a one-off export"
                )
            df = avro.decode_via_files(
                spark, df, opts.schema, opts.data_dir, scratch if scratch is not None else []
            )
            if flagged:  # a tombstone decodes to a null value
                df = df.withColumn(DELETED, F.col("value").isNull())
            parsed = F.col("value")
        with _quiet_query_context():  # the error below says it in one line
            vtype = df.limit(0).select(parsed.alias("v")).schema["v"].dataType  # analysed
    except (PySparkException, ValueError, Py4JJavaError) as e:  # from_avro: the latter
        if isinstance(e, ExportUsageError):
            raise
        text = str(e.java_exception) if isinstance(e, Py4JJavaError) else str(e)
        first = text.strip().splitlines()[0][:300]
        raise ExportUsageError(f"--schema is not a valid {opts.decode} schema: {first}") from None
    keep = [c for c in df.columns if c != "value"]
    if not isinstance(vtype, StructType):
        return df.select(*keep, parsed.alias("value"))
    fields = [f.name for f in vtype.fields]
    clash = sorted(set(fields) & set(keep))
    if clash:
        raise ExportUsageError(
            f"--schema: the decoded fields {clash} clash with the Kafka columns of the export"
        )
    return df.select(*keep, parsed.alias("_value")).select(*keep, "_value.*")


def pin_reader_schema(opts: ExportOptions) -> ExportOptions:
    """``--decode registry`` without ``--schema-version``: the subject's latest version
    now, fixed for the whole export (an incremental one decodes every micro-batch with
    it, whatever is registered meanwhile)."""
    if opts.decode != "registry" or opts.schema_version is not None:
        return opts
    from sparklog.errors import SchemaRegistryError
    from sparklog.schemas.source import open_source

    subject = opts.subject or f"{opts.topic}-value"
    try:
        source = open_source(opts.registry_url, opts.data_dir, ssl_cafile=opts.registry_ca_file)
        latest = source.latest(subject).version
    except SchemaRegistryError as e:
        raise ExportUsageError(f"--decode registry: subject {subject!r}: {e}") from None
    return dataclasses.replace(opts, schema_version=latest)


def _decode_registry(spark: SparkSession, df: DataFrame, opts: ExportOptions) -> DataFrame:
    """``--decode registry``: the value decoded in the JVM with the subject's writer
    schemas (``sparklog.schemas.spark.from_registry``), its fields as columns, and
    ``valueSchemaId``; a record that cannot be decoded fails the export, naming it. The
    headers, read for schema ids, are kept only with ``--include-headers``."""
    from pyspark.sql.types import StructType

    from sparklog.errors import OptionError, SchemaRegistryError
    from sparklog.schemas.spark import avro_in_jvm, from_registry

    if not avro_in_jvm(spark):
        raise ExportUsageError(
            "--decode registry needs Spark's from_avro: the spark-avro jar "
            "(org.apache.spark:spark-avro_2.13) on spark.jars; see docs/jvm.md"
        )
    subject = opts.subject or f"{opts.topic}-value"
    try:
        df = from_registry(
            df,
            "value",
            schema_registry_url=opts.registry_url,
            storage_path=opts.data_dir,
            subject=subject,
            version=opts.schema_version,
            schema_registry_ca_file=opts.registry_ca_file,
        )
    except (OptionError, SchemaRegistryError) as e:
        raise ExportUsageError(f"--decode registry: {e}") from None
    if not opts.include_headers:
        df = df.drop("headers")
    keep = [c for c in df.columns if c != "value"]
    vtype = df.schema["value"].dataType
    if not isinstance(vtype, StructType):
        return df.select(*keep, "value")
    clash = sorted({f.name for f in vtype.fields} & set(keep))
    if clash:
        raise ExportUsageError(
            f"--decode registry: the decoded fields {clash} clash with the Kafka columns"
        )
    return df.select(*keep, "value.*")


@contextlib.contextmanager
def _quiet_query_context() -> Iterator[None]:
    """PySpark logs every analysis error that has a query context, as a JSON ERROR line,
    before it raises; while checking a user's ``--schema`` the caller reports it itself."""
    from pyspark.logger import PySparkLogger

    loggers = [
        PySparkLogger.getLogger(n) for n in ("DataFrameQueryContextLogger", "SQLQueryContextLogger")
    ]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, before, strict=True):
            lg.disabled = was
