"""``sparklog.spark_jobs``: what long Spark jobs say while they run, and when they fail."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparklog.spark_jobs import describe_error, reporting_progress


def _nap(_row: Any) -> None:
    time.sleep(0.5)


@pytest.mark.spark
def test_a_long_job_says_how_far_its_stages_are(spark: Any) -> None:
    said: list[str] = []
    with reporting_progress(spark, said.append, "job", every_s=0.2):
        spark.range(8).repartition(4).foreach(_nap)
    assert said and all(line.startswith("job: stage ") for line in said)
    assert any("/4 tasks" in line for line in said)


@pytest.mark.spark
def test_a_quick_block_says_nothing(spark: Any) -> None:
    said: list[str] = []
    with reporting_progress(spark, said.append, "job", every_s=5):
        spark.range(3).count()
    assert said == []


SPARK_ABORT = (
    "An error occurred while calling o113.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 16.0 "
    "failed 1 times, most recent failure: Lost task 1.0 in stage 16.0 (TID 28) (localhost "
    "executor driver): org.apache.spark.SparkException: Python worker exited unexpectedly "
    "(crashed)\n\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:1)\n"
    "Caused by: java.io.EOFException\n"
)
TASK_ERROR = (
    "An error occurred while calling o9.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
    "failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 4) (localhost "
    "executor driver): org.apache.spark.api.python.PythonException: Traceback (most recent "
    'call last):\n  File "/x/sparklog/compaction/rewrite.py", line 9, in write_chunk\n'
    "sparklog.errors.CompactionOutputError: t-0 x.parquet: records 5..9 arrive after 9\n\n"
    "\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:1)\n"
)


def test_an_aborted_spark_job_is_described_by_its_cause() -> None:
    assert describe_error(Exception(SPARK_ABORT)) == (
        "Spark job aborted (Task 1 in stage 16.0 failed 1 times): "
        "Python worker exited unexpectedly (crashed)"
    )


def test_an_error_raised_by_our_code_in_a_task_is_described_by_itself() -> None:
    assert describe_error(Exception(TASK_ERROR)) == (
        "CompactionOutputError: t-0 x.parquet: records 5..9 arrive after 9"
    )


def test_a_plain_error_is_its_message_and_never_longer_than_500_characters() -> None:
    assert describe_error(ValueError("bad topic")) == "bad topic"
    assert len(describe_error(RuntimeError("x" * 2000))) == 500
