"""The architecture's rules, checked on the code's own imports (docs/ARCHITECTURE.md).

Every import counts, also one inside a function (a deferred import is still a dependency);
imports under ``if TYPE_CHECKING:`` count only for cycles (they never run, but a knot of
types is still a knot for the reader).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pickle
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


def _imports(
    path: Path, modules: frozenset[str] = frozenset(), *, typed: bool = False
) -> Iterator[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved).
    ``from pkg import sub`` of a submodule ``sub`` (one of ``modules``) imports ``pkg.sub``;
    ``from pkg import name`` of anything else imports ``pkg``."""
    tree = ast.parse(path.read_text())
    skip = set() if typed else _type_checking_lines(tree)
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


def _graph(*, typed: bool = False) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    names = frozenset(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {m for m in _imports(path, names, typed=typed) if m in modules and m != name}
        graph[name] = deps
    return graph


GRAPH = _graph()
REQUEST_PATH = tuple(
    f"sparklog.broker.{m}" for m in ("server", "connection", "context", "apis", "handlers")
)


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
        # the broker's rooms sit below its request path
        ("sparklog.broker.coordinators", REQUEST_PATH),
        ("sparklog.broker.schema_registry", REQUEST_PATH),
        ("sparklog.broker.observability", REQUEST_PATH),
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
    """Type-only imports included."""
    graph = _graph(typed=True)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append([*path[path.index(d) :], d])
            elif d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
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


def _imports_under(folder: str) -> Iterator[tuple[str, str]]:
    """(module, what it imports) for every Python file under the project's ``folder``."""
    root = PACKAGE.parent
    paths = sorted((root / folder).rglob("*.py"))
    names = frozenset(_module_name(p) for p in paths)
    for path in paths:
        for imported in _imports(path, names, typed=True):
            yield _module_name(path), imported


def test_no_test_module_imports_another_test_module() -> None:
    """What tests share lives in support modules (a folder's ``conftest.py``, ``helpers``
    and the like, or ``sparklog_testkit``): a ``test_*`` module is collected by pytest and
    never imported, so moving or deleting one test never breaks another."""
    bad = {
        f"{m} -> {d}"
        for m, d in _imports_under("tests")
        if d.startswith("tests.") and d.rpartition(".")[2].startswith("test_")
    }
    assert not bad, sorted(bad)


def test_benchmarks_import_nothing_from_tests() -> None:
    """The benchmarks and the tests share what they both use through ``sparklog_testkit``;
    ``bench/`` reaches nothing under ``tests/``."""
    bad = {f"{m} -> {d}" for m, d in _imports_under("bench") if d.split(".")[0] == "tests"}
    assert not bad, sorted(bad)


def test_the_package_imports_nothing_of_the_tests_or_their_kit() -> None:
    """``sparklog_testkit`` is not in the wheel: nothing in ``sparklog/`` imports it, or
    anything under ``tests/``."""
    bad = {
        f"{m} -> {d}"
        for m, deps in _raw_imports_of("sparklog").items()
        for d in deps
        if d.split(".")[0] in ("sparklog_testkit", "tests")
    }
    assert not bad, sorted(bad)


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
    ("package", "forbidden"),
    [
        # compaction rewrites segments with Spark: it never loads the DataSource (not even
        # through sparklog.spark, whose register does) nor the export job
        ("sparklog.compaction", ("sparklog.datasource", "sparklog.export", "sparklog.spark")),
        # export reads through the DataSource's planner, but borrows nothing from compaction
        ("sparklog.export", ("sparklog.compaction",)),
    ],
)
def test_spark_jobs_share_only_neutral_modules(package: str, forbidden: tuple[str, ...]) -> None:
    """What compaction and export share (progress lines, a failure's one line) lives in
    ``sparklog.spark_jobs``; a module either job reaches, directly or through other sparklog
    modules, is none of the ``forbidden`` ones (``sparklog.spark`` is the module itself,
    not ``sparklog.spark_jobs``)."""
    bad = {
        f"{m} reaches {d}"
        for m in _deps_of(package)
        for d in _reachable(m)
        if any(d == f or d.startswith(f + ".") for f in forbidden)
    }
    assert not bad, sorted(bad)


#: the command lines of the Spark jobs ``spark-submit.sh`` runs: each starts a SparkSession
SPARK_COMMAND_LINES = ("sparklog.cli.demo", "sparklog.cli.export", "sparklog.cli.jobs")
#: every other module of ``sparklog.cli``: the ``sparklog`` command and what it is made of
SPARKLESS_COMMAND_LINES = sorted(
    m for m in GRAPH if m.startswith("sparklog.cli.") and m not in SPARK_COMMAND_LINES
)


def _spark_imports(entry: str) -> set[str]:
    return {
        f"{m} -> {d}"
        for m in _reachable(entry)
        for d in _raw_imports_of(m).get(m, set())
        if d.split(".")[0] in ("pyspark", "delta", "py4j")
    }


@pytest.mark.parametrize(
    "entry",
    [
        "sparklog",
        "sparklog.cli",
        *SPARKLESS_COMMAND_LINES,
        "sparklog.broker.server",
        "sparklog.demo.processes",
    ],
)
def test_the_broker_and_cli_reach_no_spark(entry: str) -> None:
    """PySpark and delta-spark are extras (``sparklog[spark]``, ``sparklog[jobs]``): no
    module the broker or the CLI can import, directly or through other sparklog modules,
    imports them (tests/test_project.py runs them with PySpark unimportable). Every module
    of ``sparklog.cli`` is checked but the Spark jobs' command lines."""
    bad = _spark_imports(entry)
    assert not bad, sorted(bad)


@pytest.mark.parametrize("entry", SPARK_COMMAND_LINES)
def test_only_the_spark_jobs_command_lines_reach_spark(entry: str) -> None:
    """The command lines left out above are the Spark jobs' (they exist and start Spark),
    so the list cannot hide a command that should reach no Spark."""
    assert entry in GRAPH
    assert _spark_imports(entry)


# extras (sparklog[spark], sparklog[jobs], sparklog[s3])
_OPTIONAL = ("pyspark", "delta", "py4j", "obstore")


def _imported_modules() -> Iterator[object]:
    """Every sparklog module, imported; those that need a missing extra are left out."""
    for name in sorted(GRAPH):
        try:
            yield importlib.import_module(name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] in _OPTIONAL:
                assert importlib.util.find_spec(e.name.split(".")[0]) is None, e
                continue
            raise


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in sparklog, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module in _imported_modules():
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.split(".")[0] == "sparklog"
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_is_a_sparklog_error_in_sparklog_errors() -> None:
    """sparklog.errors is the one home of exceptions: every exception class of the package
    is defined there and derives from SparkLogError (so callers catch all with one class
    and the broker's one table maps them); a class kept importable from an old module is
    the same object, re-exported."""
    from sparklog.errors import SparkLogError

    classes = _exception_classes()
    assert "sparklog.errors.SparkLogError" in classes
    outside = sorted(n for n, c in classes.items() if c.__module__ != "sparklog.errors")
    assert not outside, outside
    not_ours = sorted(n for n, c in classes.items() if not issubclass(c, SparkLogError))
    assert not not_ours, not_ours


def test_errors_with_their_own_arguments_survive_pickling() -> None:
    """Errors raised in Spark executors reach the driver pickled: a class whose constructor
    takes more than the message rebuilds itself from its own arguments."""
    from sparklog.errors import (
        KafkaRequestError,
        NotLeaderError,
        RecordsRefusedError,
        SchemaRegistryError,
        TopicsDeniedError,
        UnconfirmedAppendError,
    )

    refused = pickle.loads(pickle.dumps(RecordsRefusedError("t-0: no key", [(1, "no key")])))
    assert (str(refused), refused.record_errors) == ("t-0: no key", [(1, "no key")])
    denied = pickle.loads(pickle.dumps(TopicsDeniedError({("t", 0), ("u", 1)})))
    assert (str(denied), denied.denied) == ("topics denied: t, u", {("t", 0), ("u", 1)})
    failed = pickle.loads(pickle.dumps(KafkaRequestError("Produce t-0", 10, "too big")))
    assert (str(failed), failed.code) == ("Produce t-0: 10 (too big)", 10)
    registry = pickle.loads(pickle.dumps(SchemaRegistryError("no such", status=404, code=40401)))
    assert (str(registry), registry.status, registry.code) == ("no such", 404, 40401)
    lost = pickle.loads(pickle.dumps(UnconfirmedAppendError(NotLeaderError("t-0: moved"))))
    assert (type(lost), str(lost), str(lost.cause)) == (
        UnconfirmedAppendError,
        "not durable: t-0: moved",
        "t-0: moved",
    )


#: how the file names of a storage root end (``sparklog/storage/names.py``)
STORAGE_SUFFIXES = (".parquet", ".arrow", ".index", ".timeindex", ".checkpoint", ".lock", ".json")
#: names and prefixes of a storage root's files and directories, as names.py spells them
STORAGE_NAMES = (".leases", ".tmp-", "topic-defaults", ".export-tmp-", "manifest/", "meta/")
#: literals that end like a storage file but name no file of a storage root, and why
NOT_STORAGE_NAMES = {
    # the Spark sink's state under the query's checkpoint location
    ("sparklog/datasource/sink_state.py", "identity.json"),
    # the part files Spark's Parquet writer leaves in an export's output directory
    ("sparklog/export/sinks.py", ".parquet"),
}


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of ``tree``'s docstring nodes (prose may name files; only code builds them)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_storage_file_names_are_built_in_names_py_only() -> None:
    """Every name of a storage root's files is built and parsed in
    ``sparklog/storage/names.py`` (docs/ARCHITECTURE.md): no other module's code holds a
    string that ends with a storage file suffix or spells a storage directory or prefix
    (an f-string's literal parts count; docstrings and comments do not)."""
    names_py = PACKAGE / "storage" / "names.py"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == names_py:
            continue
        where = str(path.relative_to(PACKAGE.parent))
        tree = ast.parse(path.read_text())
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            text = node.value
            if id(node) in prose or (where, text) in NOT_STORAGE_NAMES:
                continue
            if text.endswith(STORAGE_SUFFIXES) or any(n in text for n in STORAGE_NAMES):
                found.append(f"{where}:{node.lineno}: {text!r}")
    assert not found, found
