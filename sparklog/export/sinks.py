"""Where an export writes: Parquet, Avro and JSON directories, and Delta tables.

One-off exports (a range of offsets):

- parquet / avro / json: ``df.write`` into a new directory (an existing one is an error:
  a second export into it would mix two runs).
- delta: with the Delta jars on the session's classpath (delta-spark), ``df.write
  .format("delta")``. Without them (this environment, and any cluster without the jars),
  Spark writes the Parquet files into ``<table>/export-<run id>/`` and the commit goes
  through ``deltalake`` (delta-rs): one ``add`` action per file, committed as one new
  table version - atomically, once per export run. Files of a run that died before its
  commit are named by no version: Delta readers never see them; ``VACUUM`` removes them.
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
  application transaction ``(sparklog-export:<checkpoint>, batch id)``; a replayed batch
  whose id the table already records is skipped, so nothing is committed twice.
  Crash points (each tested by killing the job there and running it again):
  ``export.before_commit`` (the batch's files are written, no version names them: the
  rerun writes the batch again and commits it once) and ``export.after_commit`` (the
  version is committed, Spark has not recorded the batch: the rerun replays it and skips
  it by its transaction id).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparklog.errors import ExportUsageError
from sparklog.export.avro import AVRO_FORMAT
from sparklog.export.options import ExportOptions
from sparklog.export.source import DELETED
from sparklog.storage import crashpoints

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    from sparklog.spark import has_jvm_class

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


def _delta_table(out: str) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(out) if DeltaTable.is_deltatable(out) else None


def _commit_properties(txn: tuple[str, int] | None) -> Any:
    from deltalake import CommitProperties, Transaction

    if txn is None:
        return None
    return CommitProperties(app_transactions=[Transaction(txn[0], txn[1])])


def delta_append(
    spark: SparkSession, df: DataFrame, out: str, txn: tuple[str, int] | None = None
) -> Written:
    """Append ``df`` as one new Delta table version (see the module docstring)."""
    if has_delta_jars(spark) and txn is None:
        df.write.format("delta").mode("append").save(out)
        from deltalake import DeltaTable

        return Written(None, DeltaTable(out).version())
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    run = f"export-{uuid.uuid4().hex[:16]}"
    target = os.path.join(out, run)
    with _conf(df.sparkSession, "spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"):
        df.write.mode("errorifexists").parquet(target)
    files = _parquet_files(target)
    actions, rows = [], 0
    for f in files:
        md = pq.read_metadata(f)
        rows += md.num_rows
        st = os.stat(f)
        actions.append(
            AddAction(
                f"{run}/{os.path.basename(f)}",
                st.st_size,
                {},
                int(st.st_mtime * 1000),
                True,
                json.dumps({"numRecords": md.num_rows}),
            )
        )
    schema = pq.read_schema(files[0]) if files else df.limit(0).toArrow().schema
    props = _commit_properties(txn)
    table = _delta_table(out)
    crashpoints.hit("export.before_commit")
    if table is None:
        create_table_with_add_actions(out, Schema.from_arrow(schema), actions, mode="append",
                                      commit_properties=props)  # fmt: skip
    else:
        table.create_write_transaction(actions, mode="append", schema=schema,
                                       commit_properties=props)  # fmt: skip
    from deltalake import DeltaTable

    return Written(rows, DeltaTable(out).version())


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


def _micros(table: pa.Table) -> pa.Table:
    """Timestamps in microseconds (Spark's ``toArrow`` may give nanoseconds, which would
    make delta-rs turn on the timestampNanos table feature that Delta readers lack)."""
    fields = [
        pa.field(f.name, pa.timestamp("us", tz="UTC"), f.nullable)
        if pa.types.is_timestamp(f.type) else f
        for f in table.schema
    ]  # fmt: skip
    return table.cast(pa.schema(fields))


def delta_upsert(
    spark: SparkSession, df: DataFrame, out: str, txn: tuple[str, int] | None = None
) -> Written:
    """MERGE the last record of each key into the table on ``key``: update or insert live
    rows, delete keys whose last record is a tombstone (column ``DELETED``)."""
    from deltalake import DeltaTable, write_deltalake

    with _conf(df.sparkSession, "spark.sql.session.timeZone", "UTC"):
        source = _micros(latest_per_key(df).toArrow())
    live_mask = source.column(DELETED).to_pylist()
    cols = [c for c in source.column_names if c != DELETED]
    props = _commit_properties(txn)
    table = _delta_table(out)
    if table is None:
        live = source.filter([not d for d in live_mask]).select(cols)
        write_deltalake(out, live, mode="append", commit_properties=props)
        return Written(live.num_rows, DeltaTable(out).version())
    updates = {f'"{c}"': f's."{c}"' for c in cols}
    (
        table.merge(source, predicate='t."key" = s."key"', source_alias="s", target_alias="t",
                    commit_properties=props)
        .when_matched_delete(predicate=f's."{DELETED}" = true')
        .when_matched_update(updates=updates, predicate=f's."{DELETED}" = false')
        .when_not_matched_insert(updates=updates, predicate=f's."{DELETED}" = false')
        .execute()
    )  # fmt: skip
    return Written(source.num_rows, DeltaTable(out).version())


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

    def run(df: Any, batch_id: int) -> None:
        table = _delta_table(opts.out)
        done = table.transaction_version(app) if table is not None else None
        if done is not None and done >= batch_id:
            say(f"export: micro-batch {batch_id} was committed before (table version "
                f"{table.version()}); skipped")  # fmt: skip
            return
        if opts.upsert:
            w = delta_upsert(spark, decode(with_tombstone_flag(df)), opts.out, (app, batch_id))
        else:
            w = delta_append(spark, decode(df), opts.out, (app, batch_id))
        crashpoints.hit("export.after_commit")
        written.append(w.rows or 0)
        say(f"export: micro-batch {batch_id}: {w.rows:,} rows committed as table version "
            f"{w.version}")  # fmt: skip

    return run
