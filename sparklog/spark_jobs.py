"""What sparklog's Spark jobs (compaction, export) share, apart from the DataSource: how far
a long job's Spark stages are (``reporting_progress``) and one line for a failure
(``describe_error``). Imports no PySpark and no ``sparklog.datasource``, so a job that
does not read through ``format("sparklog")`` (compaction) never loads the DataSource.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def reporting_progress(
    spark: Any, say: Callable[[str], None], label: str, every_s: float = 10.0
) -> Iterator[None]:
    """While the block runs Spark jobs, say every ``every_s`` seconds how far their
    running stages are (``label: stage 4: 37/48 tasks (2 running)``), from Spark's status
    tracker: what a long export or compaction shows between its other lines. A thread
    asks; nothing is said for a block quicker than ``every_s``."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(every_s):
            parts = []
            for sid in sorted(tracker.getActiveStageIds() or []):
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(
                        f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} "
                        f"tasks ({info.numActiveTasks} running)"
                    )
            if parts:
                say(f"{label}: " + "; ".join(parts))

    thread = threading.Thread(target=report, name="sparklog-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(every_s + 5)


_ERROR_LINE = re.compile(r"^([\w.]*?)(\w+(?:Error|Exception)): (.+)$")
_TASK = re.compile(r"Task \S+ in stage \S+ failed \d+ times")


def describe_error(exc: BaseException) -> str:
    """One line for a failure, also when it comes from a Spark task, whose message holds
    a Python traceback and JVM stacks: the innermost Python error if there is one (an error
    raised by our code in a task), else the cause of the aborted Spark job."""
    lines = [ln.strip().lstrip(":").strip() for ln in str(exc).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("at ")]
    ours = []
    for ln in lines:
        m = _ERROR_LINE.match(ln)
        if (
            m
            and not m.group(1).startswith(("org.", "java.", "py4j."))
            and m.group(2) != ("Py4JJavaError")
        ):
            ours.append(f"{m.group(2)}: {m.group(3)}")
    if ours:
        return ours[-1][:500]
    for ln in lines:
        if "Job aborted due to stage failure" in ln:
            task = _TASK.search(ln)
            cause = ln.rsplit("Exception: ", 1)[-1]
            return f"Spark job aborted ({task.group(0) if task else 'a task failed'}): {cause}"[
                :500
            ]
    return (lines[0] if lines else repr(exc))[:500]
