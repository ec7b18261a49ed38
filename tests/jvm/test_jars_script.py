"""``scripts/jars.py`` (what ``make setup`` runs to fetch the JVM jars) with the real Maven:
its output is plain text, without the terminal colour codes Maven writes even in batch
mode (Maven 3.8's ``-B`` and ``-Dstyle.color=never`` still leave ``ESC[0m`` resets)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.jvm


@pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("java") is None,
                    reason="needs java and mvn")  # fmt: skip
def test_fetching_the_jars_prints_no_terminal_escape_codes(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "jars.py"), "kafka"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "SPARKLOG_JARS": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\x1b" not in out.stdout + out.stderr, repr(out.stdout + out.stderr)
    assert "sparklog: fetching the kafka jars with Maven" in out.stdout
    assert list((tmp_path / "kafka").glob("kafka-clients-*.jar"))
