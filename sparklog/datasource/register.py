"""``register(spark)``: make ``format("sparklog")`` available in a SparkSession.

The public entry point is ``sparklog.spark.register`` (it calls this one, and imports
this package only when called, so ``import sparklog.spark`` works without PySpark).
"""

from __future__ import annotations

import atexit
import contextlib
from typing import Any

from sparklog.datasource import driver
from sparklog.datasource.progress import GroupOffsetsListener
from sparklog.datasource.source import SparkLogDataSource

#: how long, at interpreter exit, Spark may take to deliver the streaming events it holds
DRAIN_AT_EXIT_MS = 10_000


def register(spark: Any) -> None:
    """Register ``format("sparklog")`` with a SparkSession (once per session).

    Also turns on Python data-source filter push-down, which the reader relies on to plan
    only the partitions and offsets a query's filters allow: PySpark refuses a reader that
    implements ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false;
    adds ``GroupOffsetsListener`` to the session (once per session), which commits a
    streaming query's group offsets when Spark finishes each micro-batch
    (``sparklog.datasource.progress``, ``sparklog.datasource.group_offsets``); and makes the
    driver check a ``sparklog`` read's or write's options before Spark runs the source, so
    a wrong option is the first line the user sees, and lets ``df.write`` run in Spark's
    default save mode (``sparklog.datasource.driver``, once per process: it wraps PySpark's
    readers' and writers' methods, its docstring says why).

    The listener is a Python object the JVM calls back, so it leaves with the Python side:
    at interpreter exit (``atexit``) the events Spark still holds are delivered, then the
    listener is removed (``_detach``). Otherwise a script that stops its query and ends
    without ``spark.stop()`` has Spark call a listener that is gone (the stopped query's
    last events, every query's termination at JVM shutdown), each call logged as an ERROR
    with a Py4J stack trace.
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SparkLogDataSource)
    driver.install()
    if not getattr(spark, "_sparklog_group_offsets", False):
        listener = GroupOffsetsListener()
        try:
            spark.streams.addListener(listener)
        except Exception:  # Spark Connect: the source's own commits remain
            return
        spark._sparklog_group_offsets = True
        atexit.register(_detach, spark, listener)


def _detach(spark: Any, listener: Any) -> None:
    """Deliver the streaming events Spark holds to ``listener`` while Python can still
    answer, then remove it from the session (``register``). Quiet if the session or its
    JVM is already gone: nothing is left to call the listener then."""
    with contextlib.suppress(Exception):  # private to Spark: best effort
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(DRAIN_AT_EXIT_MS)
    with contextlib.suppress(Exception):
        spark.streams.removeListener(listener)
