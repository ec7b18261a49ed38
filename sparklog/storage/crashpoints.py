"""Named crash points for the crash tests of multi-file changes.

Each multi-file change (sealing, rolls, the retention and compaction jobs' commits, the
Spark sink's tasks and the export's batches) calls ``hit(name)`` between its steps. When
the environment variable ``SPARKLOG_CRASH_AT`` equals ``name`` the process dies on the spot
with ``os._exit(CRASH_EXIT_CODE)``, as a SIGKILL would leave it: no cleanup, no flush of
Python buffers. The tests run a child process (a Spark job, a query) per point and check
that what it wrote then opens with the old or the new state:
tests/storage/test_crash_points.py for the storage points, tests/compaction/test_crash_points.py
for the jobs' points (``compaction.*``, ``retention.*``), tests/datasource/test_writer.py for
the sink's (``sink.*``) and tests/export/test_export.py for the export's (``export.*``).
``replace.*`` are the two steps of a segment swap committed by another process: the storage
test runs a stand-in job that commits one (``transforms.Compact``), registers and hits them,
to check how the log recovers from it. The variables are read once, at import, and reach
Spark executors and child processes through their environment.

Points are registered where they are hit, so the list is complete: a module that hits
points declares them at import, ``crashpoints.register("sink.after_state", ...)`` at module
level, and ``hit`` (and ``hooked``) refuse a name no module registered with ``ValueError``,
so a point cannot be hit, or armed by a test, without being listed. ``points()`` lists the
points of the modules imported so far; tests/storage/test_crashpoints.py checks
that every ``crashpoints.hit("...")`` in sparklog is registered by the module that hits it,
and that every registered point is hit. Unarmed, ``hit`` is one dict lookup.

Tests may also run code *at* a point in their own process (``hooked(name, fn)``): hold the
sealer back (``seal.before_write``), or commit a competing change between two steps of
another (retention dropping a segment while it is being sealed: ``seal.after_write``). For
a process they start (a broker), ``SPARKLOG_PAUSE_AT="point=ms[,point=ms]"`` makes each hit
of a point sleep that long: ``seal.before_write=2000`` is a sealer that falls behind
(bench/retention_soak.py). Neither is a setting for production.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator

CRASH_EXIT_CODE = 77
_TARGET = os.environ.get("SPARKLOG_CRASH_AT") or None

_NAME = re.compile(r"[a-z][a-z_]*\.[a-z][a-z_]*")
#: point -> the modules that registered it (where it is hit)
_REGISTERED: dict[str, set[str]] = {}


def register(*names: str) -> tuple[str, ...]:
    """Declare the crash points the calling module hits (call it at module level); returns
    ``names``. A name is ``<operation>.<step>``, lower case."""
    module = sys._getframe(1).f_globals.get("__name__", "?")
    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"crash point name {name!r} (registered by {module}) is not "
                "'<operation>.<step>' in lower case letters and underscores"
            )
        _REGISTERED.setdefault(name, set()).add(module)
    return names


def points() -> tuple[str, ...]:
    """Every crash point registered so far (by the modules imported), in registration order."""
    return tuple(_REGISTERED)


def registered_by(name: str) -> frozenset[str]:
    """The modules that registered ``name`` (empty: none)."""
    return frozenset(_REGISTERED.get(name, ()))


def _check(name: str) -> None:
    if name not in _REGISTERED:
        raise ValueError(
            f"crash point {name!r} is not registered: the module that hits it declares it "
            f"with crashpoints.register({name!r}) at import (registered: "
            f"{', '.join(sorted(_REGISTERED)) or 'none'})"
        )


_HOOKS: dict[str, Callable[[], None]] = {}


def _pauses(spec: str) -> dict[str, float]:
    out = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        point, _, ms = item.partition("=")
        out[point] = float(ms) / 1000
    return out


_PAUSES = _pauses(os.environ.get("SPARKLOG_PAUSE_AT", ""))


def hit(name: str) -> None:
    """Die here if ``SPARKLOG_CRASH_AT`` names this point (pause, run a hook: see above);
    ``ValueError`` if no module registered ``name``."""
    if name not in _REGISTERED:
        _check(name)
    if _PAUSES and name in _PAUSES:
        time.sleep(_PAUSES[name])
    if _HOOKS:
        hook = _HOOKS.get(name)
        if hook is not None:
            hook()
    if _TARGET is not None and name == _TARGET:
        os._exit(CRASH_EXIT_CODE)


@contextlib.contextmanager
def hooked(name: str, fn: Callable[[], None]) -> Iterator[None]:
    """Run ``fn`` each time this process hits ``name``, inside the block (tests only)."""
    _check(name)
    if name in _HOOKS:
        raise RuntimeError(f"crash point {name} is hooked already")
    _HOOKS[name] = fn
    try:
        yield
    finally:
        del _HOOKS[name]
