"""Shared fixtures: a fresh storage root per test, one local SparkSession per run (with the
Maven-fetched Spark jars: Spark's Kafka connector, delta-spark), and the ``jvm`` marker: a
test that needs those jars is skipped, naming what is missing, where they are not fetched -
and fails instead in CI (``CI`` set), where a missing jar must never pass as a skip."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.errors import JarsMissingError
from sparklog.jars import jars, spark_session_conf
from sparklog.storage.fs.local import LocalFileSystem


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("jvm") is None:
        return
    try:
        jars("spark")
        jars("kafka")
    except JarsMissingError as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the JVM jars: {e}")
        pytest.skip(str(e))


@pytest.fixture
def fs() -> LocalFileSystem:
    return LocalFileSystem()


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The run's one SparkSession (local[2]); tests using it carry the ``spark`` marker."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from sparklog.spark import CHECKPOINT_FILE_MANAGER_CONF, LOCAL_CHECKPOINT_FILE_MANAGER

    builder = SparkSession.builder
    for key, value in spark_session_conf().items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .appName("sparklog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config(CHECKPOINT_FILE_MANAGER_CONF, LOCAL_CHECKPOINT_FILE_MANAGER)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
