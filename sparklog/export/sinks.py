"""Where an export writes: Parquet, Avro and JSON directories, and Delta tables.

One-off exports (a range of offsets):

- parquet / avro / json: ``df.write`` into a new directory (an existing one is an error:
  a second export into it would mix two runs).
- delta: delta-spark (``require_delta``: its jar and session conf, else a usage error),
  ``df.write.format("delta").mode("append")``: one new table version per run.
- ``--upsert`` (delta only): the rows are reduced to the last record of each key; a MERGE
  on ``key`` updates or inserts live rows and deletes the keys whose last record is a
  tombstone.

Incremental exports (``--incremental --checkpoint PATH``) are a streaming query over
``format("sparklog")`` with ``Trigger.AvailableNow`` and that checkpoint: each run exports
what arrived since the last one, and a run killed anywhere is completed by the next:

- parquet / avro / json: Spark's file sink, whose ``_spark_metadata`` log lists the files of
  every committed micro-batch: readers through Spark (or any reader honouring the log) see
  each record once. A plain directory listing may also show files of a micro-batch that
  was killed before its commit; the rerun writes that batch again under new names.
- delta: ``foreachBatch`` commits each micro-batch as one table version carrying the
  application transaction ``(sparklog-export:<checkpoint>, batch id)`` - delta-spark's
  idempotent writes: ``txnAppId``/``txnVersion`` options of an append, the
  ``spark.databricks.delta.write.txnAppId``/``txnVersion`` session confs of a MERGE. Delta
  skips a write whose transaction the table already records, so a replayed batch is
  committed once. The commit sequence of one micro-batch:

  1. [export.before_write] nothing of the batch is written; the rerun replays it.
  2. delta-spark writes the batch's data files, then commits the next ``_delta_log``
     version with the ``txn`` action (put-if-absent). Files of a batch killed before its
     commit are named by no version: readers never see them, ``VACUUM`` removes them.
  3. [export.after_commit] the version is committed, Spark has not recorded the batch:
     the rerun replays it, delta-spark skips it (table version unchanged), the job says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from sparklog.errors import ExportUsageError
from sparklog.export.avro import AVRO_FORMAT
from sparklog.export.options import ExportOptions
from sparklog.export.source import DELETED
from sparklog.storage import crashpoints

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

crashpoints.register("export.before_write", "export.after_commit")

Say = Callable[[str], None]


@dataclass(frozen=True)
class Written:
    """What one write produced: rows (None where counting would cost a pass), a table
    version for Delta."""

    rows: int | None
    version: int | None = None
    skipped: bool = False


def has_delta_jars(spark: SparkSession) -> bool:
    """Whether the session can write ``format("delta")`` itself (delta-spark)."""
    from sparklog.jars import has_jvm_class

    return has_jvm_class(spark, "io.delta.tables.DeltaTable")


@contextlib.contextmanager
def _conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _non_empty(path: str) -> bool:
    return os.path.isdir(path) and any(not n.startswith(".") for n in os.listdir(path))


def _parquet_files(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.endswith(".parquet") and not n.startswith((".", "_"))
    )


def file_format(name: str) -> str:
    """Spark's name of an output format (Avro by class: "avro" needs spark-avro loaded)."""
    return AVRO_FORMAT if name == "avro" else name


def write_files(df: DataFrame, opts: ExportOptions) -> Written:
    """A one-off export to Parquet, Avro or JSON files."""
    if "://" not in opts.out and _non_empty(opts.out):
        raise ExportUsageError(
            f"--out {opts.out} already holds files; export into a new directory, or use "
            "--incremental --checkpoint to add to an export"
        )
    # an existing empty local directory is fine; elsewhere Spark refuses an existing path
    mode = "errorifexists" if "://" in opts.out else "overwrite"
    df.write.format(file_format(opts.format)).mode(mode).save(opts.out)
    if opts.format == "parquet" and "://" not in opts.out:
        return Written(sum(pq.read_metadata(f).num_rows for f in _parquet_files(opts.out)))
    return Written(None)


# ---------------------------------------------------------------------------- delta


def require_delta(spark: SparkSession) -> None:
    """ExportUsageError unless the session can write Delta through delta-spark: its jar on
    the classpath and its extension and catalog configured (``./spark-submit.sh`` does
    both once ``make setup`` fetched the jars)."""
    from sparklog.jars import DELTA_CONF

    if not has_delta_jars(spark):
        raise ExportUsageError(
            "--format delta writes through delta-spark, and this Spark session has no "
            "delta-spark jar: run `make setup` (Maven fetches it into .jars/spark) and run "
            "the export with ./spark-submit.sh, or pass the jars with --jars"
        )
    static = {k: v for k, v in DELTA_CONF.items() if k.startswith("spark.sql.")}
    missing = [f"{k}={v}" for k, v in static.items() if v not in (spark.conf.get(k, "") or "")]
    if missing:
        raise ExportUsageError(
            "--format delta needs delta-spark's session conf, set when the session is "
            "built: " + " ".join(f"--conf {m}" for m in missing)
        )


def _last_commit(spark: SparkSession, out: str) -> tuple[int | None, dict[str, str]]:
    """The table's latest version and that commit's operation metrics (None, {} if ``out``
    is no Delta table yet)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, out):
        return None, {}
    last = DeltaTable.forPath(spark, out).history(1).collect()[0]
    return int(last["version"]), dict(last["operationMetrics"] or {})


@contextlib.contextmanager
def _txn_conf(spark: SparkSession, txn: tuple[str, int] | None) -> Iterator[None]:
    """delta-spark's idempotent DML: a MERGE run with these session confs commits the
    application transaction ``txn`` and is skipped if the table already records it."""
    if txn is None:
        yield
        return
    with (
        _conf(spark, "spark.databricks.delta.write.txnAppId", txn[0]),
        _conf(spark, "spark.databricks.delta.write.txnVersion", str(txn[1])),
    ):
        yield


def _committed(spark: SparkSession, out: str, before: int | None, rows_metric: str) -> Written:
    version, metrics = _last_commit(spark, out)
    if version == before:  # delta-spark skipped a write whose transaction it had recorded
        return Written(0, version, skipped=True)
    return Written(int(metrics.get(rows_metric, 0)), version)


def delta_append(
    spark: SparkSession, df: DataFrame, out: str, txn: tuple[str, int] | None = None
) -> Written:
    """Append ``df`` as one new table version, carrying the application transaction ``txn``
    (delta-spark's ``txnAppId``/``txnVersion``: skipped if the table records it)."""
    before, _ = _last_commit(spark, out)
    writer = df.write.format("delta").mode("append")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
    writer.save(out)
    return _committed(spark, out, before, "numOutputRows")


def latest_per_key(df: DataFrame) -> DataFrame:
    """The last record (highest offset) of every key, with a tombstone flag column."""
    from pyspark.sql import functions as F

    cols = [c for c in df.columns if c != "key"]
    return (
        df.where(F.col("key").isNotNull())  # a keyless record cannot be upserted
        .groupBy("key")
        .agg(F.max_by(F.struct(*cols), "offset").alias("_last"))
        .select("key", "_last.*")
    )


def delta_upsert(
    spark: SparkSession, df: DataFrame, out: str, txn: tuple[str, int] | None = None
) -> Written:
    """MERGE the last record of each key into the table on ``key`` (delta-spark, on the
    executors): update or insert live rows, delete keys whose last record is a tombstone
    (column ``DELETED``). A table that does not exist yet is created from the live rows.
    Rows written: the keys merged."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    source = latest_per_key(df)
    cols = [c for c in source.columns if c != DELETED]
    before, _ = _last_commit(spark, out)
    if before is None:
        return delta_append(spark, source.where(~F.col(DELETED)).select(*cols), out, txn)
    values: dict[str, str | Column] = {f"`{c}`": f"s.`{c}`" for c in cols}
    with _txn_conf(spark, txn):
        (
            DeltaTable.forPath(spark, out)
            .alias("t")
            .merge(source.alias("s"), "t.key = s.key")
            .whenMatchedDelete(condition=f"s.`{DELETED}`")
            .whenMatchedUpdate(condition=f"NOT s.`{DELETED}`", set=values)
            .whenNotMatchedInsert(condition=f"NOT s.`{DELETED}`", values=values)
            .execute()
        )
    return _committed(spark, out, before, "numSourceRows")


# ---------------------------------------------------------------------------- runs


def app_id(opts: ExportOptions) -> str:
    """The Delta application id of an incremental export: one per checkpoint."""
    assert opts.checkpoint is not None
    where = opts.checkpoint if "://" in opts.checkpoint else os.path.abspath(opts.checkpoint)
    return "sparklog-export:" + hashlib.sha1(where.encode()).hexdigest()[:16]


def with_tombstone_flag(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.withColumn(DELETED, F.col("value").isNull())


def write_once(
    spark: SparkSession, df: DataFrame, opts: ExportOptions, decode: Callable[[Any], Any]
) -> Written:
    """A one-off export of ``df`` (Kafka columns) in ``opts.format``."""
    if opts.format != "delta":
        return write_files(decode(df), opts)
    require_delta(spark)
    if opts.upsert:
        return delta_upsert(spark, decode(with_tombstone_flag(df)), opts.out)
    return delta_append(spark, decode(df), opts.out)


def foreach_batch_delta(
    spark: SparkSession,
    opts: ExportOptions,
    decode: Callable[[Any], Any],
    say: Say,
    written: list[int],
) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function of an incremental Delta export (exactly once); the
    rows each micro-batch commits are appended to ``written``."""
    app = app_id(opts)
    require_delta(spark)

    def run(df: Any, batch_id: int) -> None:
        crashpoints.hit("export.before_write")
        if opts.upsert:
            w = delta_upsert(spark, decode(with_tombstone_flag(df)), opts.out, (app, batch_id))
        else:
            w = delta_append(spark, decode(df), opts.out, (app, batch_id))
        if w.skipped:
            say(
                f"export: micro-batch {batch_id} was committed before (table version "
                f"{w.version}); skipped"
            )
            return
        crashpoints.hit("export.after_commit")
        written.append(w.rows or 0)
        say(
            f"export: micro-batch {batch_id}: {w.rows:,} rows committed as table version "
            f"{w.version}"
        )

    return run
