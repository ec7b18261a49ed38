"""Spark integration entry point: ``sparklog.spark.register(spark)``."""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable, Iterator
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
#: how long, at interpreter exit, Spark may take to deliver the streaming events it holds
DRAIN_AT_EXIT_MS = 10_000


def register(spark: Any) -> None:
    """Register ``format("sparklog")`` with a SparkSession (once per session).

    Also turns on Python data-source filter push-down, which the reader relies on to plan
    only the partitions and offsets a query's filters allow: PySpark refuses a reader that
    implements ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false;
    adds ``GroupCommitListener``, which commits a streaming query's group offsets when
    Spark finishes each micro-batch (``sparklog.datasource.progress``); and makes the
    driver check a ``sparklog`` read's or write's options before Spark runs the source, so
    a wrong option is the first line the user sees, and lets ``df.write`` run in Spark's
    default save mode (``sparklog.datasource.driver``).

    The listener is a Python object the JVM calls back, so it leaves with the Python side:
    at interpreter exit (``atexit``) the events Spark still holds are delivered, then the
    listener is removed (``_detach``). Otherwise a script that stops its query and ends
    without ``spark.stop()`` has Spark call a listener that is gone (the stopped query's
    last events, every query's termination at JVM shutdown), each call logged as an ERROR
    with a Py4J stack trace.
    """
    from sparklog.datasource import driver
    from sparklog.datasource.source import SparkLogDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SparkLogDataSource)
    driver.install()
    if not getattr(spark, "_sparklog_group_commits", False):
        from sparklog.datasource.progress import GroupCommitListener

        listener = GroupCommitListener()
        try:
            spark.streams.addListener(listener)
        except Exception:  # Spark Connect: the source's own commits remain
            return
        spark._sparklog_group_commits = True
        atexit.register(_detach, spark, listener)


def _detach(spark: Any, listener: Any) -> None:
    """Deliver the streaming events Spark holds to ``listener`` while Python can still
    answer, then remove it from the session (``register``). Quiet if the session or its
    JVM is already gone: nothing is left to call the listener then."""
    with contextlib.suppress(Exception):  # private to Spark: best effort
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(DRAIN_AT_EXIT_MS)
    with contextlib.suppress(Exception):
        spark.streams.removeListener(listener)


@contextlib.contextmanager
def reporting_progress(
    spark: Any, say: Callable[[str], None], label: str, every_s: float = 10.0
) -> Iterator[None]:
    """While the block runs Spark jobs, say every ``every_s`` seconds how far their
    running stages are (``label: stage 4: 37/48 tasks (2 running)``), from Spark's status
    tracker: what a long export or compaction shows between its other lines. A thread
    asks; nothing is said for a block quicker than ``every_s``."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(every_s):
            parts = []
            for sid in sorted(tracker.getActiveStageIds() or []):
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} "
                                 f"tasks ({info.numActiveTasks} running)")  # fmt: skip
            if parts:
                say(f"{label}: " + "; ".join(parts))

    thread = threading.Thread(target=report, name="sparklog-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(every_s + 5)
