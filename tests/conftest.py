"""Shared fixtures: a fresh storage root per test, one local SparkSession per run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.storage.fs.local import LocalFileSystem


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

    session = (
        SparkSession.builder.master("local[2]")
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
