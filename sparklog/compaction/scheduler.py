"""Runs retention and the compaction jobs on a schedule (``sparklog scheduler --data-dir DIR``;
its command line: ``sparklog.cli.scheduler``).

Every topic gets two checks, each on its own interval derived from the topic's configs
(``intervals``) and clamped to ``[--min-interval, --max-interval]`` (defaults 15 s, Kafka's
``log.cleaner.backoff.ms``, and 300 s, Kafka's ``log.retention.check.interval.ms``):

- retention, every ``retention.ms / 10``, and every ``--min-interval`` when
  ``retention.bytes`` is set (a size limit is crossed by writing, not by waiting);
- compaction (topics whose ``cleanup.policy`` has ``compact``), every
  ``min(segment.ms, delete.retention.ms) / 10``: runs ``spark-submit.sh compaction
  --topic T`` when the compaction planner finds a partition worth cleaning.

How work is ordered (every tick, twice a second), so that no job starves another:

1. finished compaction jobs are reaped;
2. every due retention check runs, the longest-due first, *in the scheduler's own process*:
   retention is one manifest commit per partition (``sparklog.compaction.retention``), so it
   needs no SparkSession, no JVM and no job slot, and it never waits behind compaction of
   other topics. A topic whose compaction job is running is retained as soon as that job
   ends (before the topic's next compaction: a retention commit would make the running
   job's commit fail and its work be redone). A partition that still holds what a limit
   wants gone after its turn is reported as a warning, with why, once per state: again
   only when the reasons change (their numbers aside: the active segment grows between
   checks), and at INFO when the partition is within its limits again;
3. due compaction checks run longest-due first (so topics take turns: a topic that is
   always dirty cannot keep the slots from the others), and start a job while fewer than
   ``--max-jobs`` run. ``--max-jobs`` bounds the Spark jobs (JVMs) running at once; one
   job at a time per topic.

A check only reads manifests (the planners are pure), so a compaction job - and its JVM -
starts only when there is work. A job's output is logged line by line with its name. A
failed job (non-zero exit) is logged and its check retried after a backoff (doubling from
``--min-interval`` up to the interval); exit status 3 (another job holds the topic, or an
input changed: ``ExitCode.RETRY``) is retried at the next check. A check that raises (a
corrupt manifest, say) is logged like a failed job. ``run`` returns when its ``stop`` event
is set (the command line sets it on SIGTERM or SIGINT): it stops launching, sends SIGTERM
to running jobs, and waits for them (then SIGKILL after ``stop_timeout_s``).

Extra spark-submit options (``--spark-args "--master yarn --num-executors 4"``) go before
the job name, so the same schedule drives a cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.cli.exits import ExitCode
from sparklog.compaction import planner
from sparklog.compaction.retention import RetentionOutcome, apply_retention
from sparklog.storage import Storage, names
from sparklog.storage.config import TopicConfig
from sparklog.storage.manifest import ManifestStore
from sparklog.storage.reader import active_segment_bytes
from sparklog.storage.txnindex import read_txn_index

log = logging.getLogger("sparklog.scheduler")

RETENTION = "retention"
COMPACTION = "compaction"
DEFAULT_MIN_INTERVAL_S = 15.0
DEFAULT_MAX_INTERVAL_S = 300.0
RETAINED_KEPT = 1000
_NUMBER = re.compile(r"\d[\d,.]*")


def default_spark_submit() -> str:
    """The checkout's ``spark-submit.sh`` next to the package, else the one on PATH."""
    here = Path(__file__).resolve().parents[2] / "spark-submit.sh"
    return str(here) if here.exists() else "spark-submit.sh"


@dataclass(frozen=True)
class Intervals:
    """Seconds between two checks of a topic, per job."""

    retention_s: float
    compaction_s: float


def intervals(config: TopicConfig, *, min_s: float, max_s: float) -> Intervals:
    """The check intervals of a topic (see the module docstring)."""

    def clamp(ms: float) -> float:
        return min(max(ms / 1000, min_s), max_s)

    retention = clamp(config.retention_ms / 10) if config.retention_ms > 0 else max_s
    if config.retention_ms == 0 or config.retention_bytes >= 0:
        retention = min_s
    compaction = clamp(min(config.segment_ms, config.delete_retention_ms) / 10)
    return Intervals(retention, compaction)


def needs_work(storage: Storage, topic: str, job: str, *, now_ms: int) -> bool:
    """True if ``job`` would change some partition of ``topic`` now (reads manifests only)."""
    meta = storage.topics.get(topic)
    if job == COMPACTION and not meta.config.compact:
        return False
    for p in range(meta.partitions):
        path = names.partition_dir(storage.root, topic, p)
        manifest = ManifestStore(storage.fs, path).latest()
        if manifest is None:
            continue
        if job == COMPACTION:
            stable = read_txn_index(storage.fs, path, manifest.active.name).open_first
            if planner.plan_compaction(
                manifest, meta.config, now_ms=now_ms, stable_offset=stable
            ).worth_cleaning:
                return True
            continue
        active = active_segment_bytes(storage.fs, path, manifest.active.name)
        retention = planner.plan_retention(
            manifest, meta.config, now_ms=now_ms, active_bytes=active
        )
        if retention.delete:
            return True
    return False


@dataclass
class _Check:
    """When one (topic, job) check is next due, and its failure count."""

    due: float
    failures: int = 0


@dataclass
class _Running:
    topic: str
    job: str
    proc: subprocess.Popen[str]
    started: float
    reader: threading.Thread = field(default_factory=threading.Thread)


class Scheduler:
    """See the module docstring. ``run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        data_dir: str,
        *,
        spark_submit: str | None = None,
        spark_args: str = "",
        min_interval_s: float = DEFAULT_MIN_INTERVAL_S,
        max_interval_s: float = DEFAULT_MAX_INTERVAL_S,
        max_jobs: int = 2,
        stop_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min_interval_s <= 0 or max_interval_s < min_interval_s:
            raise ValueError("need 0 < --min-interval <= --max-interval")
        if max_jobs < 1:
            raise ValueError("--max-jobs must be at least 1")
        self.data_dir = data_dir
        self.storage = Storage(data_dir)  # may be empty yet: a broker may start later
        self.spark_submit = spark_submit or default_spark_submit()
        self.spark_args = shlex.split(spark_args)
        self.min_s = min_interval_s
        self.max_s = max_interval_s
        self.max_jobs = max_jobs
        self.stop_timeout_s = stop_timeout_s
        self._clock = clock
        self._checks: dict[tuple[str, str], _Check] = {}
        self._running: dict[str, _Running] = {}
        #: the latest retention outcomes that changed or held something (newest last)
        self.retained: list[RetentionOutcome] = []
        #: (topic, partition) -> the reasons retention last held it over its limits, each
        #: with its numbers masked: a warning is logged when they change, not every check
        self._held: dict[tuple[str, int], tuple[str, ...]] = {}

    # ------------------------------------------------------------------ the loop

    def run(self, stop: threading.Event, *, tick_s: float = 0.5) -> None:
        log.info(
            "sparklog scheduler on %s: %s, checks every %g..%g s, at most %d jobs",
            self.storage.root,
            self.spark_submit,
            self.min_s,
            self.max_s,
            self.max_jobs,
        )
        try:
            while not stop.is_set():
                self.tick()
                stop.wait(tick_s)
        finally:
            self.shutdown()
        log.info("sparklog scheduler stopped")

    def tick(self) -> None:
        """Reap finished jobs, run due retention, then start due compaction checks (the
        order of the module docstring)."""
        self._reap()
        now = self._clock()
        try:
            topics = self.storage.topics.list()
        except Exception as e:
            log.error("cannot list topics under %s: %s", self.storage.root, e)
            return
        for key in [k for k in self._held if k[0] not in topics]:  # deleted topics
            del self._held[key]
        due: list[tuple[float, str, str, _Check]] = []
        for topic in topics:
            for job in (RETENTION, COMPACTION):
                check = self._checks.setdefault((topic, job), _Check(now))
                if now >= check.due:
                    due.append((check.due, topic, job, check))
        due.sort(key=lambda d: (d[2] != RETENTION, d[0], d[1]))
        for _, topic, job, check in due:
            if topic in self._running:
                continue  # retention waits for the topic's job; a second job never starts
            if job == RETENTION:
                self._retain(topic, check, now)
            elif len(self._running) < self.max_jobs:
                self._check(topic, job, check, now)

    def _interval(self, topic: str, job: str) -> float:
        config = self.storage.topics.get(topic).config
        iv = intervals(config, min_s=self.min_s, max_s=self.max_s)
        return iv.retention_s if job == RETENTION else iv.compaction_s

    def _retain(self, topic: str, check: _Check, now: float) -> None:
        """Retention of ``topic`` in this process (step 2 of the module docstring)."""
        try:
            check.due = now + self._interval(topic, RETENTION)
            report = apply_retention(self.storage.root, [topic])
        except Exception as e:
            check.failures += 1
            check.due = now + self._backoff(check.failures, self.max_s)
            log.error("retention of topic %s failed: %s", topic, e)
            return
        check.failures = 0
        for outcome in report.outcomes:
            self._report_retention(outcome)

    def _report_retention(self, outcome: RetentionOutcome) -> None:
        if outcome.segments_deleted:
            log.info("[retention %s] %s", outcome.topic, outcome.line())
        key = (outcome.topic, outcome.partition)
        state = tuple(_NUMBER.sub("#", h) for h in outcome.held)
        if state != self._held.get(key, ()):
            if outcome.held:
                log.warning(
                    "topic %s partition %d is still over its limits after retention: %s",
                    outcome.topic,
                    outcome.partition,
                    "; ".join(outcome.held),
                )
            else:
                log.info("topic %s partition %d is within its limits again", *key)
        if state:
            self._held[key] = state
        else:
            self._held.pop(key, None)
        if outcome.segments_deleted or outcome.held:
            self.retained.append(outcome)
            del self.retained[:-RETAINED_KEPT]

    def _check(self, topic: str, job: str, check: _Check, now: float) -> None:
        try:
            interval = self._interval(topic, job)
            check.due = now + interval
            if needs_work(self.storage, topic, job, now_ms=int(time.time() * 1000)):
                self._launch(topic, job)
        except Exception as e:
            check.failures += 1
            check.due = now + self._backoff(check.failures, self.max_s)
            log.error("%s check of topic %s failed: %s", job, topic, e)

    def _backoff(self, failures: int, interval: float) -> float:
        return float(min(self.min_s * 2 ** (failures - 1), max(interval, self.min_s)))

    # ------------------------------------------------------------------ jobs

    def command(self, topic: str, job: str) -> list[str]:
        return [
            self.spark_submit,
            *self.spark_args,
            job,
            "--topic",
            topic,
            "--data-dir",
            self.storage.root,
        ]

    def _launch(self, topic: str, job: str) -> None:
        cmd = self.command(topic, job)
        log.info("starting %s of topic %s: %s", job, topic, shlex.join(cmd))
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: stop signals reach the JVM too
        )
        running = _Running(topic, job, proc, self._clock())

        def forward() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.info("[%s %s] %s", job, topic, line.rstrip())

        running.reader = threading.Thread(target=forward, daemon=True, name=f"{job}-{topic}")
        running.reader.start()
        self._running[topic] = running

    def _reap(self) -> None:
        for topic, r in list(self._running.items()):
            code = r.proc.poll()
            if code is None:
                continue
            r.reader.join(5)
            del self._running[topic]
            check = self._checks[(topic, r.job)]
            took = self._clock() - r.started
            if code == 0:
                check.failures = 0
                log.info("%s of topic %s done in %.1f s", r.job, topic, took)
            elif code == ExitCode.RETRY:
                log.warning(
                    "%s of topic %s must be retried (exit 3); next check in %.0f s",
                    r.job,
                    topic,
                    max(check.due - self._clock(), 0),
                )
            else:
                check.failures += 1
                check.due = self._clock() + self._backoff(check.failures, self._interval_or_max(r))
                log.error(
                    "%s of topic %s failed (exit %d) after %.1f s; retrying in %.0f s",
                    r.job,
                    topic,
                    code,
                    took,
                    check.due - self._clock(),
                )

    def _interval_or_max(self, r: _Running) -> float:
        try:
            return self._interval(r.topic, r.job)
        except Exception:
            return self.max_s

    @property
    def running(self) -> list[tuple[str, str]]:
        return [(r.topic, r.job) for r in self._running.values()]

    def shutdown(self) -> None:
        """SIGTERM every running job's process group, wait, SIGKILL what is left."""
        for r in self._running.values():
            log.info("stopping %s of topic %s (pid %d)", r.job, r.topic, r.proc.pid)
            _signal_group(r.proc, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for r in self._running.values():
            try:
                r.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(r.proc, signal.SIGKILL)
                r.proc.wait()
            r.reader.join(5)
        self._running.clear()


def _signal_group(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the job's own process group (start_new_session)
