"""One exit-code table (``sparklog.cli.exits``) for every command line, and docs/cli.md
prints it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sparklog.cli import main
from sparklog.cli.exits import MEANINGS, ExitCode
from sparklog.storage import Storage

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_has_a_meaning_and_docs_print_it() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    rows = set(re.findall(r"^\| (\d+) \| `(\w+)` \| (.+) \|$", doc, re.M))
    assert rows == {(str(c.value), c.name, MEANINGS[c]) for c in ExitCode}


def _numeric_exits(path: Path) -> list[str]:
    """``return N``, ``sys.exit(N)``, ``SystemExit(N)`` and ``EXIT_...`` names with a number
    N written out, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        value = None
        if isinstance(node, ast.Return):
            value = node.value
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "SystemExit"):
            value = node.args[0] if node.args else None
        elif isinstance(node, ast.Assign):
            names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(n.upper().startswith("EXIT_") for n in names):
                found.append(f"{path.name}:{node.lineno}: {names}")
        if isinstance(value, ast.Constant) and type(value.value) is int:
            found.append(f"{path.name}:{node.lineno}: exit {value.value}")
    return found


@pytest.mark.parametrize(
    "path",
    [
        *sorted((ROOT / "sparklog" / "cli").glob("*.py")),
        *sorted((ROOT / "jobs").glob("*.py")),
        ROOT / "sparklog" / "compaction" / "scheduler.py",
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_command_lines_exit_by_the_table_only(path: Path) -> None:
    """No command line writes an exit status as a number or keeps its own constants (the
    scheduler reads its jobs' codes by name too)."""
    assert _numeric_exits(path) == []


def test_bad_arguments_exit_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "list"]) == ExitCode.USAGE  # neither --bootstrap-server nor --data-dir
    assert "give exactly one of" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal
        main(["topics", "list", "--partitions", "x"])
    assert refused.value.code == ExitCode.USAGE


def test_other_errors_exit_failed(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    Storage(root).topics.create("t", 1)
    assert main(["topics", "describe", "nope", "--data-dir", root]) == ExitCode.FAILED
    assert "nope" in capsys.readouterr().err
