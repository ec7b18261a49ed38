"""The broker benchmarks' broker child process, temp dirs, and their cleanup.

``BrokerProcess`` runs ``python -m sparklog.cli broker start --data-dir DIR --listen
127.0.0.1:0`` and reads the port from the "listening on HOST:PORT" line it logs on stderr.
The child asks the kernel for SIGKILL if the benchmark dies (``PR_SET_PDEATHSIG``), and
``cleanup_on_signals`` turns SIGTERM/SIGHUP into ``SystemExit`` so that ``finally`` blocks
(broker stop, temp dir removal) run when a benchmark is interrupted.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
from collections.abc import Iterator
from types import FrameType

from _machine import process_cpu_seconds

from sparklog_testkit.processes import BrokerProcess as _BrokerProcess


class BrokerProcess(_BrokerProcess):
    """A sparklog broker in a child process on 127.0.0.1 (an ephemeral port), with the
    CPU accounting the benchmarks report."""

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def check_alive(self) -> None:
        if not self.alive:
            raise RuntimeError("the broker exited:\n" + "\n".join(self.lines[-40:]))


@contextlib.contextmanager
def temp_dir(prefix: str, base: str | None = None) -> Iterator[str]:
    """A fresh directory, deleted on exit (errors included)."""
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def cleanup_on_signals() -> None:
    """SIGTERM and SIGHUP raise SystemExit, so ``finally`` blocks stop brokers and remove
    temp dirs (Ctrl-C already raises KeyboardInterrupt)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# ---------------------------------------------------------------------------- profiling
