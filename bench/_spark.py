"""The benchmarks' SparkSession."""

from __future__ import annotations

from typing import Any


def spark_session(app: str, master: str = "local[2]", **conf: str) -> Any:
    """The benches' SparkSession: no UI or progress bars, UTC, 4 GiB driver, checkpoints
    through the local checkpoint file manager (as ``conf/spark-defaults.conf``), ``conf``
    added (keys with ``_`` for ``.``; a value of ``""`` leaves Spark's default), log level
    ERROR; the JVM jars (``sparklog.jars.spark_session_conf``) when fetched."""
    from pyspark.sql import SparkSession

    from sparklog.jars import spark_session_conf
    from sparklog.spark import CHECKPOINT_FILE_MANAGER_CONF, LOCAL_CHECKPOINT_FILE_MANAGER

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
    )
    if conf.pop(CHECKPOINT_FILE_MANAGER_CONF.replace(".", "_"), None) != "":
        builder = builder.config(CHECKPOINT_FILE_MANAGER_CONF, LOCAL_CHECKPOINT_FILE_MANAGER)
    for key, value in spark_session_conf().items():  # Spark's Kafka connector, delta-spark
        builder = builder.config(key, value)
    for key, value in conf.items():
        builder = builder.config(key.replace("_", "."), value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
