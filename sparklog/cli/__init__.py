"""Every sparklog command line; the libraries they call keep the logic.

``ls`` is the map: ``arguments`` (the arguments several commands share: how a command
reaches a broker or etcd), ``broker`` (``sparklog broker start``), ``cluster`` (``sparklog
cluster describe``), ``command`` (the ``sparklog`` command: its parser and ``main``), ``demo``
(the demo job), ``describe`` (what ``sparklog topics describe`` prints), ``exits`` (the one
exit-code table), ``export`` (the export job), ``groups`` (``sparklog groups``), ``jobs``
(the retention and compaction jobs), ``scheduler`` (``sparklog scheduler``), ``security``
(``sparklog users`` and ``acls``), ``topics`` (``sparklog topics``).

``python -m sparklog.cli`` and the ``sparklog`` script run ``main``; ``spark-submit.sh``
runs ``jobs/*.py``, which call the jobs' ``main``. The ``sparklog`` command reaches no
Spark (tests/test_architecture.py); the jobs' command lines import PySpark only when they
start a session. This package imports nothing until ``main`` runs, so a library that
reads the exit-code table (the scheduler) loads no command.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``sparklog`` command (``sparklog.cli.command``)."""
    from sparklog.cli.command import main as run

    return run(argv)
