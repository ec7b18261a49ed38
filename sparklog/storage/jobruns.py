"""The last run of a maintenance job on a topic: ``<topic dir>/jobs/<job>.json``
(``names.job_run_path``; jobs: retention, compaction)::

    {"format": 1, "job": "retention", "topic": "orders", "ended_ms": 1764100000000,
     "seconds": 1.25, "partitions": 4, "segments_removed": 3, "records_removed": 12000,
     "bytes_removed": 1234567}

``seconds`` is how long the run took: for retention, its pass over this topic; for
compaction, the whole run (one Spark job compacts all its topics together).

Written by the job when it ends (``sparklog.compaction``), whatever it removed (zero
included, so a run that found nothing to do still shows as a run); replaced whole with
``FileSystem.write_atomic``, so a reader sees the old report or the new one. Read by the
brokers for ``/metrics``. A report, not a commit: the manifests say what a job changed;
this file only says when it last ran and how much it removed. Concurrent runs of one job
on one topic (two schedulers) each write theirs; the last one stays.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass

from sparklog.storage import names
from sparklog.storage.fs import FileSystem

FORMAT = 1
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRun:
    """One run of ``job`` on ``topic`` (the module docstring's fields)."""

    job: str
    topic: str
    ended_ms: int
    seconds: float
    partitions: int
    segments_removed: int
    records_removed: int
    bytes_removed: int

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT, **asdict(self)}).encode()


def record(fs: FileSystem, root: str, run: JobRun) -> None:
    """Write ``run`` as its topic's last run of its job. A report: a failure to write it
    (a topic deleted meanwhile, a full disk) is logged, never the job's failure."""
    try:
        if not fs.exists(names.topic_dir(root, run.topic)):
            return  # deleted while the job ran: no report to keep
        path = names.job_run_path(root, run.topic, run.job)
        fs.makedirs(path.rsplit("/", 1)[0])
        fs.write_atomic(path, run.to_json())
    except OSError as e:
        log.warning("cannot record the %s run of %s: %s", run.job, run.topic, e)


def last(fs: FileSystem, root: str, topic: str, job: str) -> JobRun | None:
    """The last recorded run of ``job`` on ``topic``; None if none, or unreadable (a
    report: a torn or foreign file is not worth an error)."""
    path = names.job_run_path(root, topic, job)
    try:
        if not fs.exists(path):
            return None
        d = json.loads(fs.read_bytes(path))
        if d.get("format") != FORMAT:
            return None
        return JobRun(
            str(d["job"]),
            str(d["topic"]),
            int(d["ended_ms"]),
            float(d["seconds"]),
            int(d["partitions"]),
            int(d["segments_removed"]),
            int(d["records_removed"]),
            int(d["bytes_removed"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def now_ms() -> int:
    return int(time.time() * 1000)
