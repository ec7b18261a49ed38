"""The jobs' command-line contract that needs no Spark (their one line for a failure:
``tests/test_spark_jobs.py``)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sparklog.storage import Storage

from .helpers import Model, append

REPO = Path(__file__).resolve().parents[2]


def test_crontab_example_runs_existing_jobs_through_spark_submit() -> None:
    lines = (REPO / "conf" / "crontab.example").read_text().splitlines()
    commands = [ln for ln in lines if "./spark-submit.sh" in ln and not ln.startswith("# ")]
    assert len(commands) == 2
    for ln in commands:
        job = ln.split("./spark-submit.sh ", 1)[1].split()[0]
        assert (REPO / "jobs" / f"{job}.py").exists(), job


def test_spark_submit_runs_the_retention_job_with_a_summary_per_partition(root: str) -> None:
    storage = Storage(root)
    storage.topics.create("events", 2, {"retention.ms": "3600000"})
    model = Model()
    old = int(time.time() * 1000) - 7_200_000
    append(storage, model, 1, [b"k"] * 3, [b"a", b"b", b"c"], ts=old, topic="events")
    append(storage, model, 1, [b"k"], [b"d"], ts=old + 7_200_000, roll=False, topic="events")
    out = subprocess.run(
        [str(REPO / "spark-submit.sh"), "retention", "--data-dir", root],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "retention events-0: no log on disk yet" in lines
    assert any(ln.startswith("retention events-1: deleted 1 segments (3 records") for ln in lines)
    assert lines[-1].startswith("retention: done in ")
    bad = subprocess.run(
        [str(REPO / "spark-submit.sh"), "retention", "--topic", "nope", "--data-dir", root],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2
    assert "retention: error: topic 'nope' does not exist" in bad.stdout + bad.stderr


def test_the_jobs_call_a_wrong_data_dir_by_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparklog.cli.jobs import retention_main

    missing = str(tmp_path / "nope")
    assert retention_main(["--data-dir", missing]) == 2
    assert f"retention: error: {missing}: no sparklog storage here" in capsys.readouterr().err
