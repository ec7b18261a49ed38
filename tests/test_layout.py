"""docs/ARCHITECTURE.md's layout is the tree's: the table of packages names every top-level
module and package of ``sparklog/`` and nothing that is gone, and each "``sparklog/X/`` in
``ls`` order" list names exactly X's modules and subpackages, in ``ls`` order. Also, nothing
in ``sparklog/`` is there only for tests or benchmarks: every module is reached from what
users run (the command line, the broker, the Spark entry point and DataSource, the jobs).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sparklog"
ARCHITECTURE = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def _entries(directory: Path) -> list[str]:
    """``directory``'s modules (without ``.py``) and subpackages (with ``/``), sorted as
    ``ls`` sorts them; ``__init__``, caches and C sources left out."""
    names = []
    for p in directory.iterdir():
        if p.is_dir() and (p / "__init__.py").exists():
            names.append(p.name + "/")
        elif p.suffix == ".py" and p.name != "__init__.py":
            names.append(p.stem)
    return sorted(names, key=lambda n: n.rstrip("/"))


def _without_parentheses(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _ls_lists() -> dict[str, list[str]]:
    """Each "`sparklog/X/` in `ls` order: ..." paragraph: X -> the names it lists (the
    backticked names outside parentheses, which explain them)."""
    lists = {}
    for m in re.finditer(
        r"`sparklog/([\w/]+?)/` in `ls` order:(.*?)(?:\n\n|\Z)", ARCHITECTURE, re.S
    ):
        body = _without_parentheses(m.group(2))
        lists[m.group(1)] = re.findall(r"`([\w]+/?)`", body)
    return lists


LS_LISTS = _ls_lists()


def test_the_architecture_page_has_ls_lists() -> None:
    assert {"storage", "kafka", "broker"} <= set(LS_LISTS), sorted(LS_LISTS)


@pytest.mark.parametrize("package", sorted(LS_LISTS))
def test_an_ls_list_names_exactly_its_package(package: str) -> None:
    directory = PACKAGE / package
    assert directory.is_dir(), f"docs/ARCHITECTURE.md lists sparklog/{package}/, which is gone"
    assert LS_LISTS[package] == _entries(directory)


def _table_paths() -> set[str]:
    """Every ``sparklog/...`` path in the first column of the table of packages (a bare name
    after one, as in "`sparklog/cli.py`, `cli_security.py`", is in the same folder)."""
    paths = set()
    for line in ARCHITECTURE.splitlines():
        if not line.startswith("| `"):
            continue
        in_package = False
        for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
            if name.startswith("sparklog/"):
                paths.add(name)
                in_package = True
            elif in_package and "/" not in name.rstrip("/"):
                paths.add(f"sparklog/{name}")
            else:
                in_package = False
    return paths


def test_the_table_of_packages_names_every_top_level_module_and_package() -> None:
    listed = _table_paths()
    present = {
        f"sparklog/{n}" if n.endswith("/") else f"sparklog/{n}.py" for n in _entries(PACKAGE)
    }
    present |= {f"sparklog/{p.name}" for p in PACKAGE.glob("*.c")}
    assert sorted(present - listed) == [], "not in docs/ARCHITECTURE.md's table"
    assert sorted(listed - present) == [], "in docs/ARCHITECTURE.md's table, not in the tree"


# ----------------------------------------------------------------------- used by users

#: what users run: the ``sparklog`` command (pyproject's script), the broker it starts, the
#: Spark entry point and the DataSource Spark loads by name, and the jobs spark-submit runs
ENTRY_MODULES = ("sparklog.spark", "sparklog.datasource")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    here = _module_name(path) if path.is_relative_to(PACKAGE) else ""
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            # importing a.b.c runs a/__init__ and a/b/__init__ too
            parts = name.split(".")
            out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules
    return out


def _entry_points() -> set[str]:
    scripts = re.search(
        r"\[project\.scripts\]\n(.*?)(?:\n\[|\Z)", (ROOT / "pyproject.toml").read_text(), re.S
    )
    assert scripts is not None
    found = {m.split(":")[0] for m in re.findall(r'=\s*"([^"]+)"', scripts.group(1))}
    return found | set(ENTRY_MODULES)


def _started(path: Path, modules: set[str]) -> set[str]:
    """Modules ``path`` starts by name in a child process (``python -m sparklog.X``)."""
    started = set(re.findall(r'"-m",\s*"(sparklog[\w.]*)"', path.read_text()))
    return (started | {f"{m}.__main__" for m in started}) & modules


def test_nothing_in_the_package_is_there_only_for_tests_or_benchmarks() -> None:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    names = set(modules)
    todo = sorted(m for m in _entry_points() if m in modules)
    for job in (ROOT / "jobs").glob("*.py"):  # the jobs spark-submit runs
        todo += sorted(_imports(job, names) | _started(job, names))
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += sorted((_imports(modules[m], names) | _started(modules[m], names)) - seen)
    assert sorted(names - seen) == [], "used by no command, job or Spark entry point"
