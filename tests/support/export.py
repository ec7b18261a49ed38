"""The export job run the way its tests run it (tests/export, tests/datasource)."""

from __future__ import annotations

from typing import Any

from sparklog.cli.export import parse
from sparklog.export.job import export


def run(spark: Any, root: str, out: str, *args: str) -> Any:
    return export(spark, parse(["--topic", "t", "--data-dir", root, "--out", out, *args]),
                  progress=lambda _line: None)  # fmt: skip
