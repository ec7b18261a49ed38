"""The demos: the whole product on one machine, end to end, checked as it runs.

- ``embedded``: ``make demo`` (one broker, producers, a streaming query with a consumer
  group, compaction, retention, exports);
- ``cluster``: ``./spark-submit.sh demo --brokers 3`` (brokers over one directory and etcd,
  leaders killed under a producer, the history checked);
- ``processes``: the broker and etcd child processes they start; ``workload`` and
  ``checker``: the cluster demo's producers and the check of what they were told.

Here: what both demos share (the report, a failed check, the tidy-up of their directory).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.errors import DemoCheckError

Say = Callable[[str], None]


@dataclass
class DemoReport:
    lines: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def add(self, line: str) -> None:
        self.lines.append(line)


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise DemoCheckError(what)


def tidy(data_dir: str, broker_dir: str | None, *, keep: bool) -> str:
    """Remove the demo's directory unless ``keep``; a report line either way. With
    ``broker_dir``, the data-dir lease is taken first: the broker let go of its data."""
    from sparklog.storage import Storage
    from sparklog.storage.lease import DATA_DIR

    size = sum(f.stat().st_size for f in Path(data_dir).rglob("*") if f.is_file())
    if keep:
        return f"kept       {data_dir} ({size / 1e6:,.1f} MB on disk; --keep)"
    if broker_dir is not None:
        with Storage(broker_dir).leases.acquire(DATA_DIR, "demo cleanup"):
            pass
    shutil.rmtree(data_dir)
    return f"removed    {data_dir} ({size / 1e6:,.1f} MB; --keep keeps it)"
