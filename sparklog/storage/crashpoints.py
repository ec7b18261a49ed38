"""Named crash points for the crash tests of multi-file changes.

Each multi-file change (sealing, rolls, and the retention and compaction jobs' commits)
calls ``hit(name)`` between its steps. When the environment variable ``SPARKLOG_CRASH_AT``
equals ``name`` the process dies on the spot with ``os._exit(CRASH_EXIT_CODE)``, as a
SIGKILL would leave it: no cleanup, no flush of Python buffers. The tests run a child
process per point and check that the log then opens with the old or the new state:
tests/storage/test_crash_points.py for the storage points, tests/compaction/test_crash_points.py
for the jobs' points (``compaction.*``, ``retention.*``, listed in ``sparklog.compaction``'s
modules where they are hit). ``replace.*`` are the two steps of a segment swap committed by
another process: the storage test runs a stand-in job that commits one
(``transforms.Compact``) and hits them, to check how the log recovers from it.
The variable is read once, at import; unset, ``hit`` is one comparison.

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
import time
from collections.abc import Callable, Iterator

CRASH_EXIT_CODE = 77
_TARGET = os.environ.get("SPARKLOG_CRASH_AT") or None

#: Every crash point, so tests can check they cover them all.
POINTS = (
    "roll.after_new_file",
    "roll.after_commit",
    "seal.before_write",
    "seal.after_write",
    "seal.refused",
    "seal.after_commit",
    "replace.after_write",
    "replace.after_commit",
    "retention.after_commit",
    "compaction.after_segment_write",
    "compaction.after_write",
    "compaction.after_commit",
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
    if name in _HOOKS:
        raise RuntimeError(f"crash point {name} is hooked already")
    _HOOKS[name] = fn
    try:
        yield
    finally:
        del _HOOKS[name]
