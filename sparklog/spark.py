"""Spark integration entry point: ``sparklog.spark.register(spark)``.

``register`` lives beside the DataSource (``sparklog.datasource.register``) and
``reporting_progress`` with what the Spark jobs share (``sparklog.spark_jobs``); both stay
importable from here. Importing this module imports no PySpark.
"""

from __future__ import annotations

from typing import Any

from sparklog.spark_jobs import reporting_progress

__all__ = [
    "CHECKPOINT_FILE_MANAGER_CONF",
    "LOCAL_CHECKPOINT_FILE_MANAGER",
    "register",
    "reporting_progress",
]

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
    """Register ``format("sparklog")`` with a SparkSession (once per session): see
    ``sparklog.datasource.register.register``, which this calls. Imported here, when
    called, so that ``import sparklog.spark`` works without PySpark (the call then raises
    ``SparkMissingError`` saying how to get it)."""
    from sparklog.datasource.register import register as register_datasource

    register_datasource(spark)
