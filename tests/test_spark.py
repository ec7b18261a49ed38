"""``sparklog.spark``: what long Spark jobs say while they run."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparklog.spark import reporting_progress

pytestmark = pytest.mark.spark


def _nap(_row: Any) -> None:
    time.sleep(0.5)


def test_a_long_job_says_how_far_its_stages_are(spark: Any) -> None:
    said: list[str] = []
    with reporting_progress(spark, said.append, "job", every_s=0.2):
        spark.range(8).repartition(4).foreach(_nap)
    assert said and all(line.startswith("job: stage ") for line in said)
    assert any("/4 tasks" in line for line in said)


def test_a_quick_block_says_nothing(spark: Any) -> None:
    said: list[str] = []
    with reporting_progress(spark, said.append, "job", every_s=5):
        spark.range(3).count()
    assert said == []
