"""The list of crash points is complete: each is registered by the module that hits it.

The source is read with ``ast`` for every ``crashpoints.hit("...")`` in sparklog; each
module that hits a point is imported (its registration runs at import) and must have
registered it. A module that needs a missing extra (PySpark) is left out. The crashes
themselves are tested in test_crash_points.py, tests/compaction, tests/datasource and
tests/export.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

from sparklog.storage import crashpoints

PACKAGE = Path(crashpoints.__file__).resolve().parents[1]
_OPTIONAL = ("pyspark", "delta", "py4j")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _hits() -> dict[str, set[str]]:
    """module -> the point names it passes to ``crashpoints.hit``, read from the source;
    a name that is not a string literal shows as ``<not a literal: ...>``."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "hit"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "crashpoints"
            ):
                continue
            arg = node.args[0] if len(node.args) == 1 and not node.keywords else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                name = arg.value
            else:
                name = f"<not a literal: {ast.unparse(node)}>"
            found.setdefault(_module_name(path), set()).add(name)
    return found


HITS = _hits()


def _import(module: str) -> bool:
    """Import ``module``; False if it needs an extra that is not installed."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in _OPTIONAL and importlib.util.find_spec(top) is None:
            return False
        raise
    return True


def test_the_source_scan_finds_the_points_of_every_kind_of_change() -> None:
    found = {p for names in HITS.values() for p in names}
    for point in ("roll.after_commit", "seal.refused", "compaction.after_commit",
                  "sink.after_state", "sink.after_commit", "export.before_write"):  # fmt: skip
        assert point in found, sorted(found)


@pytest.mark.parametrize("module", sorted(HITS))
def test_every_point_a_module_hits_is_registered_by_that_module(module: str) -> None:
    if not _import(module):
        pytest.skip(f"{module} needs an extra that is not installed")
    unregistered = sorted(p for p in HITS[module] if module not in crashpoints.registered_by(p))
    assert not unregistered, f"{module} hits {unregistered} without registering them"


def test_every_point_sparklog_registers_is_hit_where_it_is_registered() -> None:
    imported = [m for m in sorted(map(_module_name, PACKAGE.rglob("*.py"))) if _import(m)]
    registered = {
        (m, p)
        for p in crashpoints.points()
        for m in crashpoints.registered_by(p)
        if m.split(".")[0] == "sparklog"
    }
    hit = {(m, p) for m in imported for p in HITS.get(m, ())}
    assert registered == hit


def test_hitting_an_unregistered_point_is_refused() -> None:
    with pytest.raises(ValueError, match=r"crash point 'roll\.after_comit' is not registered"):
        crashpoints.hit("roll.after_comit")
    assert "roll.after_comit" not in crashpoints.points()


def test_hooking_an_unregistered_point_is_refused() -> None:
    with (
        pytest.raises(ValueError, match=r"'seal\.befor_write' is not registered"),
        crashpoints.hooked("seal.befor_write", lambda: None),
    ):
        pass


def test_a_point_name_must_be_operation_dot_step() -> None:
    with pytest.raises(ValueError, match="is not '<operation>.<step>'"):
        crashpoints.register("Sink-After-State")
    assert "Sink-After-State" not in crashpoints.points()
