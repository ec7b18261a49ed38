"""Retention: delete whole rolled segments, sealed or not, past ``retention.ms`` /
``retention.bytes`` (or wholly below the log start offset) and advance the log start offset.

Retention reads no record and rewrites nothing: it is one manifest commit per partition, so
it runs on the driver alone (the retention job starts no SparkSession). Per partition:

1. read the active segment's size (``reader.active_segment_bytes``, the high-watermark
   position; 0 on an object store, which does not hold it), for ``retention.bytes``;
2. commit ``transforms.DropSegments`` with the segments ``planner.plan_retention`` picks,
   planned on the latest version inside the commit, so a lost race (the broker rolled or
   sealed meanwhile, a compaction swapped segments) simply re-plans: retention never
   conflicts.                               [retention.after_commit: after each
   partition's commit; partitions done so far have their new log start, the others the old]

The outcome says what a limit wants gone that retention could not delete, and why
(``RetentionPlan.held``: the active segment, or an expired segment behind a younger one).

The job never deletes a file: the broker notices the new version (it watches manifests)
and deletes the dropped segments after ``file.delete.delay.ms``; without a broker, the
next ``PartitionLog.open`` does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sparklog.compaction import planner
from sparklog.compaction.planner import RetentionPlan
from sparklog.storage import Storage, crashpoints, jobruns, names, transforms
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.reader import active_segment_bytes
from sparklog.storage.topics import TopicMeta

crashpoints.register("retention.after_commit")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RetentionOutcome:
    """What retention did to one partition."""

    topic: str
    partition: int
    segments_deleted: int
    bytes_deleted: int
    records_deleted: int
    log_start_before: int
    log_start_after: int
    reasons: tuple[str, ...] = ()
    note: str = ""
    held: tuple[str, ...] = ()

    def line(self) -> str:
        label = f"retention {self.topic}-{self.partition}"
        if self.note:
            return f"{label}: {self.note}"
        if not self.segments_deleted:
            done = f"{label}: nothing to delete (log start {self.log_start_after})"
        else:
            why = ", ".join(dict.fromkeys(self.reasons))
            done = (
                f"{label}: deleted {self.segments_deleted} segments ({self.records_deleted:,} "
                f"records, {self.bytes_deleted / 1e6:,.1f} MB; {why}), "
                f"log start {self.log_start_before} -> {self.log_start_after}"
            )
        return "; ".join([done, *(f"could not delete: {h}" for h in self.held)])


@dataclass(frozen=True)
class RetentionReport:
    outcomes: tuple[RetentionOutcome, ...]
    seconds: float


def apply_partition(
    storage: Storage, meta: TopicMeta, partition: int, *, now_ms: int
) -> RetentionOutcome:
    """Retention for one partition (see the module docstring)."""
    path = names.partition_dir(storage.root, meta.name, partition)
    store = ManifestStore(storage.fs, path, writer=f"retention:{os.uname().nodename}:{os.getpid()}")
    before = store.latest()
    if before is None:
        return RetentionOutcome(meta.name, partition, 0, 0, 0, 0, 0, note="no log on disk yet")
    active_bytes = active_segment_bytes(storage.fs, path, before.active.name)
    plans: list[RetentionPlan] = []

    def choose(m: Manifest) -> tuple[SegmentInfo, ...]:
        plan = planner.plan_retention(m, meta.config, now_ms=now_ms, active_bytes=active_bytes)
        plans.append(plan)
        return plan.delete

    after = store.commit(transforms.DropSegments(choose))
    plan = plans[-1]
    if plan.delete:
        crashpoints.hit("retention.after_commit")
    return RetentionOutcome(
        meta.name,
        partition,
        len(plan.delete),
        plan.bytes,
        plan.records,
        before.log_start_offset,
        after.log_start_offset,
        plan.reasons,
        held=plan.held,
    )


def apply_retention(
    root: str,
    topics: Sequence[str] | None = None,
    *,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> RetentionReport:
    """Retention for ``topics`` (default: every topic) under the storage root ``root``."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    storage = Storage(root).require()
    wanted = list(dict.fromkeys(topics)) if topics else storage.topics.list()
    metas = [storage.topics.get(t) for t in wanted]
    outcomes = []
    for meta in metas:
        began = time.monotonic()
        mine = [apply_partition(storage, meta, p, now_ms=now) for p in range(meta.partitions)]
        for outcome in mine:
            say(outcome.line())
        outcomes += mine
        jobruns.record(
            storage.fs,
            storage.root,
            jobruns.JobRun(
                "retention",
                meta.name,
                jobruns.now_ms(),
                time.monotonic() - began,
                len(mine),
                sum(o.segments_deleted for o in mine),
                sum(o.records_deleted for o in mine),
                sum(o.bytes_deleted for o in mine),
            ),
        )
    return RetentionReport(tuple(outcomes), time.monotonic() - t0)
