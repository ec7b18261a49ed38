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
