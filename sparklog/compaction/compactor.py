"""Compaction as a Spark job: plan on the driver, find and rewrite in Spark, commit per partition.

``compact(spark, root, topics)`` runs these steps (crash points in brackets; what the log
holds if the job dies there):

1. Driver: take the topic's compaction lease (``sparklog.storage.lease``), read each
   partition's latest manifest and plan it (``planner.plan_compaction``). Nothing is
   written.
2. Spark, one task per input segment: the last offset of every key in the segment
   (``rewrite.last_offsets``); then a Spark aggregation over all of them keeps the largest
   offset per (partition, key): the *winners*, counted per segment.
3. Driver: group the inputs into outputs (``planner.plan_groups``).
4. Spark, one task per input segment that has winners: its surviving records
   (``rewrite.kept_chunks``); then one task per output group writes the new sealed segment
   from them in offset order (``rewrite.GroupWriter``).
   [compaction.after_segment_write: in a task, once an output is written. The Spark job
   fails and nothing is committed: every partition keeps its old set; the written files are
   orphans that garbage collection removes after its orphan grace.]
5. Driver: outputs nothing survived in are written empty (they keep the manifest
   contiguous); every output is checked against the winners counted in step 2.
   [compaction.after_write: every new file is written and fsynced, nothing is committed:
   the old set everywhere, the new files orphans.]
6. Driver, per partition: commit ``transforms.Compact`` - the section swapped for the
   outputs, the ``cleaned`` marks updated - as the next manifest version
   (``ManifestStore.commit``: create-if-absent; the transform re-checks that every input is
   still live). If retention
   or another writer dropped an input meanwhile the partition is reported as a conflict and
   its outputs stay orphans.
   [compaction.after_commit: after each partition's commit. Partitions committed so far
   have the new set, the others the old one; each partition is one or the other.]

The job never deletes a file and never calls the broker: the broker picks up the new
version by watching the manifest, and deletes the replaced files after
``file.delete.delay.ms`` (readers holding them finish first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.compaction import planner, rewrite
from sparklog.compaction.planner import CompactionPlan, OutputGroup
from sparklog.compaction.rewrite import GroupResult, GroupTask, SegmentTask
from sparklog.errors import CompactionOutputError, SegmentNotLiveError
from sparklog.spark_jobs import reporting_progress
from sparklog.storage import Storage, crashpoints, jobruns, names, transforms
from sparklog.storage.lease import compaction_lease
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.topics import TopicMeta
from sparklog.storage.txnindex import read_txn_index

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

crashpoints.register("compaction.after_write", "compaction.after_commit")

Progress = Callable[[str], None]


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


@dataclass(frozen=True)
class PartitionOutcome:
    """What compaction did to one partition: ``status`` is compacted, skipped or conflict."""

    topic: str
    partition: int
    status: str
    reason: str
    segments_before: int = 0
    segments_after: int = 0
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tombstones_removed: int = 0
    base_offset: int = -1
    end_offset: int = -1
    log_start_offset: int = 0

    def line(self) -> str:
        label = f"compaction {self.topic}-{self.partition}"
        if self.status != "compacted":
            return f"{label}: {self.status}: {self.reason}"
        return (
            f"{label}: {self.segments_before} -> {self.segments_after} segments, "
            f"{self.records_before:,} -> {self.records_after:,} records "
            f"({self.records_before - self.records_after:,} removed, "
            f"{self.tombstones_removed:,} of them tombstones), "
            f"{_mb(self.bytes_before)} -> {_mb(self.bytes_after)}, "
            f"offsets {self.base_offset}..{self.end_offset - 1} rewritten in place, "
            f"log start {self.log_start_offset} ({self.reason})"
        )


@dataclass(frozen=True)
class CompactionReport:
    outcomes: tuple[PartitionOutcome, ...]
    seconds: float

    @property
    def conflicts(self) -> list[PartitionOutcome]:
        return [o for o in self.outcomes if o.status == "conflict"]

    @property
    def records_read(self) -> int:
        return sum(o.records_before for o in self.outcomes if o.status == "compacted")


@dataclass
class _Job:
    """One partition being compacted (driver-side bookkeeping, never shipped to Spark)."""

    meta: TopicMeta
    partition: int
    path: str
    store: ManifestStore
    manifest: Manifest
    plan: CompactionPlan
    segs: list[SegmentTask] = field(default_factory=list)
    #: the partition's aborted transactions (producer id, first, last offset)
    aborted: tuple[tuple[int, int, int], ...] = ()
    groups: tuple[OutputGroup, ...] = ()
    group_ids: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.meta.name}-{self.partition}"


# ---------------------------------------------------------------------- Spark UDTFs


class _LastOffsets:
    """Arrow UDTF of step 2: input rows are segment numbers (``tasks`` index)."""

    tasks: tuple[SegmentTask, ...] = ()

    def eval(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        for seg in batch.column("id").to_pylist():
            for out in rewrite.last_offsets(self.tasks[seg]):
                yield pa.Table.from_batches([out])


class _Kept:
    """Arrow UDTF of step 4a: input rows are winners (seg, offset) of this task's segments;
    ``terminate`` emits each segment's surviving records as chunks."""

    tasks: tuple[SegmentTask, ...] = ()

    def __init__(self) -> None:
        self.parts: list[pa.RecordBatch] = []

    def eval(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        self.parts.append(batch)
        return iter(())

    def terminate(self) -> Iterator[pa.Table]:
        # Spark 4.3 fails (NullPointerException) when terminate yields for a task that had
        # no input rows, so yield only when there was input
        if not self.parts:
            return
        table = pa.Table.from_batches(self.parts)
        self.parts = []
        for seg in sorted(pc.unique(table.column("seg")).to_pylist()):
            task = self.tasks[seg]
            winners = table.filter(pc.equal(table.column("seg"), seg)).column("offset")
            for first, rows, removed, data in rewrite.kept_chunks(task, winners.combine_chunks()):
                yield pa.table(
                    {
                        "grp": pa.array([task.group], pa.int32()),
                        "first_offset": pa.array([first], pa.int64()),
                        "rows": pa.array([rows], pa.int64()),
                        "tombstones_removed": pa.array([removed], pa.int64()),
                        "data": pa.array([data], pa.binary()),
                    }
                )


def _attempt() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


class _Write:
    """Arrow UDTF of step 4b: input rows are chunks sorted by (group, first offset); each
    group is streamed into its output segment, whose result row is emitted when it ends."""

    groups: tuple[GroupTask, ...] = ()

    def __init__(self) -> None:
        self.writer: rewrite.GroupWriter | None = None

    def _finish(self) -> Iterator[pa.Table]:
        if self.writer is not None:
            result = self.writer.close()
            self.writer = None
            yield result.to_table()

    def eval(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        grp = batch.column("grp").to_pylist()
        data = batch.column("data")
        removed = batch.column("tombstones_removed").to_pylist()
        try:
            for i, g in enumerate(grp):
                if self.writer is None or self.writer.task.group != g:
                    yield from self._finish()
                    self.writer = rewrite.GroupWriter(self.groups[g], attempt=_attempt())
                self.writer.write_chunk(data[i].as_buffer(), removed[i])
        except BaseException:
            if self.writer is not None:
                self.writer.abandon()
            raise

    def terminate(self) -> Iterator[pa.Table]:
        yield from self._finish()


def _udtf(base: type, attr: str, value: tuple[Any, ...], return_type: str) -> Any:
    """An Arrow UDTF whose class carries ``value`` (pickled with the class to executors)."""
    from pyspark.sql.functions import arrow_udtf

    return arrow_udtf(
        type(base.__name__.strip("_"), (base,), {attr: value}), returnType=return_type
    )


# ---------------------------------------------------------------------- driver


def _topics(storage: Storage, topics: Sequence[str] | None) -> list[TopicMeta]:
    if topics:
        return [storage.topics.get(t) for t in dict.fromkeys(topics)]
    metas = [storage.topics.get(t) for t in storage.topics.list()]
    return [m for m in metas if m.config.compact]


def _plan(
    storage: Storage, meta: TopicMeta, now_ms: int
) -> tuple[list[_Job], list[PartitionOutcome]]:
    jobs, skipped = [], []
    for p in range(meta.partitions):
        path = names.partition_dir(storage.root, meta.name, p)
        store = ManifestStore(
            storage.fs, path, writer=f"compaction:{os.uname().nodename}:{os.getpid()}"
        )
        manifest = store.latest()
        if manifest is None:
            skipped.append(PartitionOutcome(meta.name, p, "skipped", "no log on disk yet"))
            continue
        txn = read_txn_index(storage.fs, path, manifest.active.name)
        plan = planner.plan_compaction(
            manifest, meta.config, now_ms=now_ms, stable_offset=txn.open_first
        )
        if not plan.worth_cleaning:
            skipped.append(
                PartitionOutcome(
                    meta.name, p, "skipped", plan.reason, log_start_offset=manifest.log_start_offset
                )
            )
            continue
        aborted = tuple((a.producer_id, a.first_offset, a.last_offset) for a in txn.aborted)
        jobs.append(_Job(meta, p, path, store, manifest, plan, aborted=aborted))
    return jobs, skipped


def _find_winners(
    spark: SparkSession, tasks: list[SegmentTask]
) -> tuple[DataFrame, dict[int, int]]:
    """Step 2: the winners (seg, offset), persisted, and their count per segment."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    last = _udtf(_LastOffsets, "tasks", tuple(tasks), "part int, seg int, key binary, offset long")
    found = last(spark.range(0, len(tasks), 1, len(tasks)).asTable())
    winners = (
        found.groupBy("part", "key")
        .agg(F.max("offset").alias("offset"), F.max("seg").alias("seg"))
        .select("seg", "offset")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    counts = {int(r["seg"]): int(r["count"]) for r in winners.groupBy("seg").count().collect()}
    return winners, counts


def _rewrite(
    winners: DataFrame, segs: list[SegmentTask], groups: list[GroupTask], counts: dict[int, int]
) -> list[GroupResult]:
    """Step 4: surviving records per segment, then one output segment per group."""
    with_winners = sum(1 for s in segs if counts.get(s.seg))
    if not with_winners:
        return []
    kept = _udtf(
        _Kept,
        "tasks",
        tuple(segs),
        "grp int, first_offset long, rows long, tombstones_removed long, data binary",
    )(winners.repartition(with_winners, "seg").asTable())
    write = _udtf(_Write, "groups", tuple(groups), rewrite.RESULT_TYPE)
    ordered = kept.repartition(len(groups), "grp").sortWithinPartitions("grp", "first_offset")
    rows = write(ordered.asTable()).collect()
    return [GroupResult.from_row(r) for r in rows]


def _outputs(
    job: _Job, results: dict[int, GroupResult], counts: dict[int, int]
) -> list[SegmentInfo]:
    """Step 5 for one partition: the output segments, checked against the winner counts."""
    out = []
    for group, gid, segs in zip(job.groups, job.group_ids, _segs_by_group(job), strict=True):
        result = results.get(gid)
        if result is None:
            result = rewrite.write_empty(_group_task(job, group, gid))
        expected = sum(counts.get(s.seg, 0) for s in segs)
        if result.records + result.tombstones_removed != expected:
            raise CompactionOutputError(
                f"{job.label} {result.name}: {result.records} records written and "
                f"{result.tombstones_removed} tombstones removed, but {expected} records of "
                f"offsets {group.base_offset}..{group.next_offset - 1} are the last of their key"
            )
        out.append(
            SegmentInfo(
                result.name,
                group.base_offset,
                group.next_offset,
                records=result.records,
                size_bytes=result.size_bytes,
                min_timestamp=result.min_timestamp,
                max_timestamp=result.max_timestamp,
                created_ms=min(s.created_ms for s in group.inputs),
                first_tombstone=result.first_tombstone if result.first_tombstone >= 0 else None,
            )
        )
    return out


def _segs_by_group(job: _Job) -> list[list[SegmentTask]]:
    by_name = {s.name: s for s in job.segs}
    return [[by_name[i.name] for i in g.inputs] for g in job.groups]


def _group_task(job: _Job, group: OutputGroup, gid: int) -> GroupTask:
    seg0 = job.segs[0]
    return GroupTask(
        gid,
        seg0.root,
        job.meta.name,
        job.partition,
        group.name,
        group.base_offset,
        group.next_offset,
    )


def _commit(
    job: _Job, outputs: list[SegmentInfo], now_ms: int, tombstones: int
) -> PartitionOutcome:
    """Step 6 for one partition."""
    swap = transforms.Compact(
        tuple(s.name for s in job.plan.section),
        tuple(outputs),
        end_offset=job.plan.end_offset,
        now_ms=now_ms,
        delete_retention_ms=job.meta.config.delete_retention_ms,
    )
    try:
        committed = job.store.commit(swap)
    except SegmentNotLiveError as e:
        return PartitionOutcome(
            job.meta.name,
            job.partition,
            "conflict",
            f"{e}; nothing committed, the partition is compacted at the next run",
        )
    crashpoints.hit("compaction.after_commit")
    return PartitionOutcome(
        job.meta.name,
        job.partition,
        "compacted",
        job.plan.reason,
        segments_before=len(job.plan.section),
        segments_after=len(outputs),
        records_before=job.plan.records,
        records_after=sum(s.records for s in outputs),
        bytes_before=sum(s.size_bytes for s in job.plan.section),
        bytes_after=sum(s.size_bytes for s in outputs),
        tombstones_removed=tombstones,
        base_offset=job.plan.base_offset,
        end_offset=job.plan.end_offset,
        log_start_offset=committed.log_start_offset,
    )


def compact(
    spark: SparkSession,
    root: str,
    topics: Sequence[str] | None = None,
    *,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> CompactionReport:
    """Compact ``topics`` (default: every topic whose cleanup.policy has compact) under the
    storage root ``root`` (see the module docstring)."""
    say = progress or (lambda _msg: None)
    t0 = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    storage = Storage(root).require()
    metas = _topics(storage, topics)
    outcomes: list[PartitionOutcome] = []
    leases = storage.leases
    holder = f"compaction job on {os.uname().nodename}"
    with contextlib.ExitStack() as stack:
        for meta in metas:
            stack.enter_context(leases.acquire(compaction_lease(meta.name), holder))
        jobs: list[_Job] = []
        for meta in metas:
            planned, skipped = _plan(storage, meta, now)
            jobs += planned
            outcomes += skipped
        for o in outcomes:
            say(o.line())
        if jobs:
            outcomes += _run(spark, storage, storage.executor_root, jobs, now, say)
    report = CompactionReport(tuple(outcomes), time.monotonic() - t0)
    _record_runs(storage, [m.name for m in metas], report)
    return report


def _record_runs(storage: Storage, topics: list[str], report: CompactionReport) -> None:
    """Each topic's run (``sparklog.storage.jobruns``): what compaction removed."""
    for topic in topics:
        mine = [o for o in report.outcomes if o.topic == topic]
        done = [o for o in mine if o.status == "compacted"]
        jobruns.record(
            storage.fs,
            storage.root,
            jobruns.JobRun(
                "compaction",
                topic,
                jobruns.now_ms(),
                report.seconds,
                len(mine),
                sum(o.segments_before - o.segments_after for o in done),
                sum(o.records_before - o.records_after for o in done),
                sum(o.bytes_before - o.bytes_after for o in done),
            ),
        )


def _run(
    spark: SparkSession,
    storage: Storage,
    root_uri: str,
    jobs: list[_Job],
    now_ms: int,
    say: Progress,
) -> list[PartitionOutcome]:
    tasks: list[SegmentTask] = []
    for part, job in enumerate(jobs):
        for s in job.plan.section:
            assert s.next_offset is not None
            t = SegmentTask(
                len(tasks),
                part,
                root_uri,
                job.meta.name,
                job.partition,
                s.name,
                s.base_offset,
                s.next_offset,
                job.plan.tombstones_below,
                aborted=tuple(
                    a for a in job.aborted if a[2] >= s.base_offset and a[1] < s.next_offset
                ),
            )
            tasks.append(t)
            job.segs.append(t)
        say(
            f"compaction {job.label}: cleaning {len(job.plan.section)} segments "
            f"({job.plan.records:,} records, {_mb(sum(s.size_bytes for s in job.plan.section))}, "
            f"offsets {job.plan.base_offset}..{job.plan.end_offset - 1}): {job.plan.reason}"
        )
    sc = spark.sparkContext
    say(f"compaction: finding the last offset of every key in {len(tasks)} segments")
    sc.setJobDescription("sparklog compaction: last offset per key")
    with reporting_progress(spark, say, "compaction: last offset per key"):
        winners, counts = _find_winners(spark, tasks)
    try:
        groups: list[GroupTask] = []
        for job in jobs:
            kept = {t.name: counts.get(t.seg, 0) for t in job.segs}
            job.groups = planner.plan_groups(
                job.plan.section,
                kept,
                segment_bytes=job.meta.config.segment_bytes,
                on_disk=storage.fs.listdir(job.path),
            )
            group_of: dict[str, int] = {}
            for g in job.groups:
                gid = len(groups)
                job.group_ids.append(gid)
                groups.append(_group_task(job, g, gid))
                group_of.update((i.name, gid) for i in g.inputs)
            job.segs = [dataclasses.replace(t, group=group_of[t.name]) for t in job.segs]
        segs = [t for job in jobs for t in job.segs]
        assert [t.seg for t in segs] == list(range(len(tasks)))
        say(
            f"compaction: {sum(counts.values()):,} records are the last of their key; "
            f"rewriting {len(segs)} segments into {len(groups)}"
        )
        sc.setJobDescription("sparklog compaction: rewrite segments")
        with reporting_progress(spark, say, "compaction: rewrite"):
            results = {r.group: r for r in _rewrite(winners, segs, groups, counts)}
    finally:
        winners.unpersist()
        sc.setJobDescription(None)  # type: ignore[arg-type]
    per_job = []
    for job in jobs:
        outputs = _outputs(job, results, counts)
        removed = sum(results[g].tombstones_removed for g in job.group_ids if g in results)
        per_job.append((job, outputs, removed))
    crashpoints.hit("compaction.after_write")
    outcomes = []
    for job, outputs, removed in per_job:
        outcome = _commit(job, outputs, now_ms, removed)
        say(outcome.line())
        outcomes.append(outcome)
    return outcomes
