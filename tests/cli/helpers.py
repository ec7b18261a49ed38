"""The ``sparklog`` command line run as a user runs it, for the CLI tests."""

from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args], capture_output=True, text=True, timeout=60
    )
