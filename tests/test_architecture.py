"""The architecture's rules, checked on the code's own imports (docs/ARCHITECTURE.md).

Every import counts, also one inside a function (a deferred import is still a dependency);
only imports under ``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sparklog"
MAX_MODULE_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path, modules: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved).
    ``from pkg import sub`` of a submodule ``sub`` (one of ``modules``) imports ``pkg.sub``;
    ``from pkg import name`` of anything else imports ``pkg``."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield sub if sub in modules else base


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    names = frozenset(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {m for m in _imports(path, names) if m in modules and m != name}
        graph[name] = deps
    return graph


GRAPH = _graph()


def _deps_of(prefix: str) -> dict[str, set[str]]:
    return {m: d for m, d in GRAPH.items() if m == prefix or m.startswith(prefix + ".")}


def _raw_imports_of(prefix: str) -> dict[str, set[str]]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if name == prefix or name.startswith(prefix + "."):
            out[name] = set(_imports(path))
    return out


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("sparklog.datasource", ("sparklog.broker",)),
        ("sparklog.broker", ("sparklog.datasource", "sparklog.compaction", "sparklog.export")),
        ("sparklog.kafka", ("sparklog.broker", "sparklog.datasource")),
        ("sparklog.storage", ("sparklog.broker", "sparklog.datasource", "sparklog.kafka")),
        # cluster coordination serves brokers: it knows nothing of Spark or the jobs
        ("sparklog.cluster", ("sparklog.datasource", "sparklog.compaction", "sparklog.export")),
    ],
)
def test_packages_keep_out_of_each_other(package: str, forbidden: tuple[str, ...]) -> None:
    bad = {
        f"{m} -> {d}"
        for m, deps in _deps_of(package).items()
        for d in deps
        if d.startswith(forbidden)
    }
    assert not bad, sorted(bad)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        # storage is files only: no networking, no Spark
        ("sparklog.storage", ("socket", "asyncio", "kio", "aiokafka", "pyspark", "ssl", "aetcd")),
        # the shared Kafka pieces run in executors and the broker alike: no Spark
        ("sparklog.kafka", ("pyspark",)),
        ("sparklog.broker", ("pyspark",)),
        ("sparklog.cluster", ("pyspark",)),
    ],
)
def test_packages_import_no_library_outside_their_job(
    package: str, forbidden: tuple[str, ...]
) -> None:
    bad = {
        f"{m} -> {d}"
        for m, deps in _raw_imports_of(package).items()
        for d in deps
        if d.split(".")[0] in forbidden
    }
    assert not bad, sorted(bad)


def test_there_are_no_import_cycles() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(GRAPH[m]):
            if state.get(d) == 1:
                cycles.append([*path[path.index(d) :], d])
            elif d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
    assert not cycles, [" -> ".join(c) for c in cycles]


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long


def _reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(GRAPH.get(m, ()))
    return seen


@pytest.mark.parametrize(
    "entry", ["sparklog", "sparklog.cli", "sparklog.broker.server", "sparklog.harness"]
)
def test_the_broker_and_cli_reach_no_spark(entry: str) -> None:
    """PySpark and delta-spark are extras (``sparklog[spark]``, ``sparklog[jobs]``): no
    module the broker or the CLI can import, directly or through other sparklog modules,
    imports them (tests/test_project.py runs them with PySpark unimportable)."""
    bad = {
        f"{m} -> {d}"
        for m in _reachable(entry)
        for d in _raw_imports_of(m).get(m, set())
        if d.split(".")[0] in ("pyspark", "delta", "py4j")
    }
    assert not bad, sorted(bad)
