"""The project's own commands: the demo, the Java check, spark-submit.sh."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.spark
def test_make_demo_runs_end_to_end_and_checks_its_own_report(tmp_path: Path) -> None:
    # what `make demo` runs, at a smaller size; the demo checks every step against its
    # model and fails (exit 1, "demo: FAILED: ...") on any mismatch
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "demo", "--data-dir", str(tmp_path / "demo"),
         "--events", "20000", "--keys", "2000"],
        capture_output=True, text=True, timeout=900, env={**os.environ},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout[out.stdout.index("sparklog demo: OK") :]
    for step in ("produced", "read", "streamed", "compacted", "retention", "exported",
                 "shutdown", "removed"):  # fmt: skip
        assert f"  {step} " in report, report
    assert "group lag" in report and "-> 0 records" in report
    compacted = re.search(r"compacted +orders: ([\d,]+) -> ([\d,]+) records .*?then "
                          r"([\d,]+) -> ([\d,]+) records", report)  # fmt: skip
    assert compacted, report
    first_in, first_out, second_in, second_out = (
        int(g.replace(",", "")) for g in compacted.groups()
    )
    assert first_in <= 20_000 and first_out <= first_in and second_out <= second_in, report
    # the demo took the broker's data-dir lease (the broker let go of its data), then
    # removed its directory: a run leaves nothing behind unless asked to (--keep)
    assert not (tmp_path / "demo").exists()


@pytest.mark.slow
@pytest.mark.spark
def test_the_cluster_demo_kills_a_leader_and_loses_nothing(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "demo", "--brokers", "3", "--kills", "1",
         "--data-dir", str(tmp_path / "cdemo")],
        capture_output=True, text=True, timeout=900, env={**os.environ},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout[out.stdout.index("sparklog demo: OK") :]
    assert "failover   SIGKILL of broker" in report, report
    checked = re.search(r"checked +Spark read ([\d,]+) records.*ops ok (\d+) .*anomalies: "
                        r"lost 0, duplicate 0, inconsistent 0, nonmonotonic 0, skipped 0, "
                        r"reordered 0", report)  # fmt: skip
    assert checked and int(checked.group(2)) > 1000, report


def test_missing_java_is_a_clear_message(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "check-java.sh")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "needs Java 17" in out.stderr
    assert "apt-get install" in out.stderr


def test_old_java_is_a_clear_message(tmp_path: Path) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "check-java.sh")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "found Java '11.0.2'" in out.stderr


def test_spark_submit_rejects_an_unknown_job() -> None:
    out = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--master", "local[1]", "no-such-job"],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert out.returncode == 2
    assert "unknown job 'no-such-job'" in out.stderr


def test_spark_submit_without_a_job_lists_the_jobs() -> None:
    out = subprocess.run([str(ROOT / "spark-submit.sh")], capture_output=True, text=True)
    assert out.returncode == 2
    assert "demo" in out.stderr
