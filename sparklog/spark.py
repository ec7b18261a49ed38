"""Spark integration entry point: ``sparklog.spark.register(spark)``."""

from __future__ import annotations

from typing import Any

#: Spark's checkpoint file manager built on the Hadoop ``FileSystem`` API. Spark's default
#: (``FileContext``-based) renames each offset and commit log file through Hadoop's
#: ``RawLocalFileSystem``, which, without Hadoop's native library (pyspark ships none),
#: runs ``readlink`` as a child process of the JVM for every rename: ~80 ms of a local
#: micro-batch on 2 cores (docs/benchmarks.md, latency). The FileSystem-based manager
#: writes the same temp-file-then-rename sequence without child processes. Set it as
#: ``spark.sql.streaming.checkpointFileManagerClass`` where checkpoints are on a local
#: disk (``conf/spark-defaults.conf`` does); ``register`` leaves the session's choice alone.
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
CHECKPOINT_FILE_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"


def register(spark: Any) -> None:
    """Register ``format("sparklog")`` with a SparkSession (once per session).

    Also turns on Python data-source filter push-down, which the reader relies on to plan
    only the partitions and offsets a query's filters allow: PySpark refuses a reader that
    implements ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false;
    adds ``GroupCommitListener``, which commits a streaming query's group offsets when
    Spark finishes each micro-batch (``sparklog.datasource.progress``); and lets
    ``df.write.format("sparklog").save()`` run in Spark's default save mode
    (``_accept_default_save_mode``).
    """
    from sparklog.datasource.source import SparkLogDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SparkLogDataSource)
    _accept_default_save_mode()
    if not getattr(spark, "_sparklog_group_commits", False):
        from sparklog.datasource.progress import GroupCommitListener

        try:
            spark.streams.addListener(GroupCommitListener())
            spark._sparklog_group_commits = True
        except Exception:  # Spark Connect: the source's own commits remain
            pass


def has_jvm_class(spark: Any, name: str) -> bool:
    """Whether the session's JVM can load class ``name`` (so whether an optional Spark
    package, such as spark-avro or delta-spark, is on its classpath)."""
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.java.lang.Class.forName(name)
        return True
    except Exception:
        return False


_ERROR_IF_EXISTS = ("error", "errorifexists", "default")


def _accept_default_save_mode() -> None:
    """Make ``df.write.format("sparklog")`` accept the default save mode, ErrorIfExists, as
    Spark's Kafka sink does: a log has nothing that could exist already, so the write
    appends. Spark refuses that mode for every Python data source before the source sees
    it (UNSUPPORTED_DATA_SOURCE_SAVE_MODE), so this wraps PySpark's ``DataFrameWriter`` to
    ask for Append in its place - for format ``sparklog`` only. Ignore and Overwrite are
    still refused, as the Kafka sink refuses them."""
    from pyspark.sql.readwriter import DataFrameWriter

    if getattr(DataFrameWriter, "_sparklog_save_mode", False):
        return
    plain_format, plain_mode, plain_save = (
        DataFrameWriter.format,
        DataFrameWriter.mode,
        DataFrameWriter.save,
    )

    def format(self: Any, source: str) -> Any:
        self._sparklog_sink = str(source).strip().lower() == "sparklog"
        return plain_format(self, source)

    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            self._sparklog_mode = str(saveMode).strip().lower()
        return plain_mode(self, saveMode)

    def save(self: Any, path: Any = None, format: Any = None, mode: Any = None,
             partitionBy: Any = None, **options: Any) -> None:  # fmt: skip
        sink = getattr(self, "_sparklog_sink", False)
        if format is not None:
            sink = str(format).strip().lower() == "sparklog"
        chosen = str(mode).lower() if mode is not None else getattr(self, "_sparklog_mode", None)
        if sink and (chosen is None or chosen in _ERROR_IF_EXISTS):
            mode = "append"
        plain_save(self, path, format, mode, partitionBy, **options)

    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign]
    DataFrameWriter._sparklog_save_mode = True  # type: ignore[attr-defined]
