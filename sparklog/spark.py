"""Spark integration entry point: ``sparklog.spark.register(spark)``."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register ``format("sparklog")`` with a SparkSession (once per session).

    Also turns on Python data-source filter push-down, which the reader relies on to plan
    only the partitions and offsets a query's filters allow: PySpark refuses a reader that
    implements ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is false.
    """
    from sparklog.datasource.source import SparkLogDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SparkLogDataSource)
