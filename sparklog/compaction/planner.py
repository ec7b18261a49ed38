"""Pure planners of retention and compaction: manifests and topic configs in, plans out.

No Spark, no I/O, no clock: callers pass ``now_ms``. The active segment belongs to the
broker and is never planned for deletion or rewrite.

Retention (``plan_retention``, Kafka's ``deleteOldSegments``) considers every *rolled*
segment, sealed (``.parquet``) or still awaiting its seal (``.arrow``): a rolled segment is
as immutable as a sealed one, so retention never waits for the sealer (which skips, and
never resurrects, a segment retention dropped; ``sparklog.storage.log``). It deletes the
longest prefix of rolled segments in which every segment is (a) wholly below the log start
offset (after DeleteRecords; any ``cleanup.policy``), or, for ``cleanup.policy`` with
``delete``, (b) older than ``retention.ms`` by its largest record timestamp, or (c) needed
to bring the partition's size down to ``retention.bytes``: the bytes of every segment
file, sealed or not, plus the active segment's (its high-watermark position), as Kafka
counts a log's size. ``RetentionPlan.held`` says what a limit wants gone that retention
cannot delete, and why (the active segment; an expired segment behind a younger one).

Compaction (``plan_compaction``, Kafka's cleaner):

- The *section* is the run of sealed segments from the first one not wholly below the log
  start offset up to (not including) the first *uncleanable* one: the first segment whose
  largest timestamp is newer than ``now - min.compaction.lag.ms``, that is not sealed, or
  that ends past the last stable offset (an open transaction's records may yet be aborted).
- Segments never rewritten (generation 0, as the broker sealed them) are *dirty*; rewritten
  ones (generation >= 1) are *clean*. The clean segments always form a prefix of the
  section, because every compaction rewrites a whole section.
- Dirty ratio = dirty bytes / section bytes. A partition is cleaned when the ratio reaches
  ``min.cleanable.dirty.ratio`` (and something is dirty), when a dirty segment holds a record
  older than ``max.compaction.lag.ms`` (whatever the ratio), or when a clean segment holds a
  tombstone that may now be removed (so tombstones go even when no new data comes).
- Cleaning keeps, of every record in the section, exactly those whose offset is the
  largest offset of their key in the section (keys seen only in older segments are kept);
  records without a key are dropped, as Kafka's cleaner does. Offsets never change.
- Transactions: the records of aborted transactions are dropped and never win over a
  key's committed record; control records (markers) are kept whatever their key, and go
  only with retention (Kafka removes them once their transaction's records are gone).
- Tombstones (null values) at offsets below ``tombstones_below`` are removed:
  the manifest's ``cleaned`` marks say when each offset range was first compacted, and a
  tombstone is removed once ``delete.retention.ms`` has passed since then (Kafka's KIP-534
  rule, at the granularity of compaction runs). A consumer that reads a key's older value
  before the first compaction of its tombstone therefore always has ``delete.retention.ms``
  to reach the tombstone.

Output grouping (``plan_groups``): consecutive section segments are rewritten into one
output while the estimated output (input bytes times the fraction of records kept) stays
within ``segment.bytes``; a segment keeping nothing always joins its neighbours' output.
Each output covers exactly the offsets of its inputs (manifest contiguity) and is named by
its first input's base offset with a generation no file of that base offset has used, so a
new file never replaces an old one by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sparklog.storage import names
from sparklog.storage.config import TopicConfig
from sparklog.storage.manifest import (
    NO_TIMESTAMP,
    Manifest,
    SegmentInfo,
    tombstone_horizon,
)

MAX_GENERATION = 99_999

REASON_LOG_START = "below the log start offset"
REASON_TIME = "retention.ms"
REASON_BYTES = "retention.bytes"


# ---------------------------------------------------------------------------- retention


@dataclass(frozen=True)
class RetentionPlan:
    """The rolled segments retention deletes (a prefix of the log), why, and what it must
    leave although a limit wants it gone (``held``, one sentence each)."""

    delete: tuple[SegmentInfo, ...]
    reasons: tuple[str, ...]
    log_start_offset: int
    held: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(s.size_bytes for s in self.delete)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.delete)


def _sealed_prefix(manifest: Manifest) -> list[SegmentInfo]:
    out = []
    for seg in manifest.segments:
        if seg.active or not seg.sealed:
            break
        out.append(seg)
    return out


def _expired(seg: SegmentInfo, config: TopicConfig, now_ms: int) -> bool:
    return config.retention_ms >= 0 and now_ms - seg.max_timestamp > config.retention_ms


def plan_retention(
    manifest: Manifest, config: TopicConfig, *, now_ms: int, active_bytes: int = 0
) -> RetentionPlan:
    """What retention deletes now (see the module docstring). ``active_bytes`` is the size
    of the active segment (its high-watermark position), counted towards
    ``retention.bytes`` as Kafka counts it."""
    rolled = list(manifest.segments[:-1])
    reasons: list[str] = []
    total = sum(s.size_bytes for s in rolled) + active_bytes
    excess = total - config.retention_bytes if config.retention_bytes >= 0 else -1
    for seg in rolled:
        assert seg.next_offset is not None  # rolled segments are never open-ended
        if seg.next_offset <= manifest.log_start_offset:
            reasons.append(REASON_LOG_START)
        elif not config.delete:
            break
        elif _expired(seg, config, now_ms):
            reasons.append(REASON_TIME)
        elif excess >= 0 and excess - seg.size_bytes >= 0:
            reasons.append(REASON_BYTES)
        else:
            break
        excess -= seg.size_bytes
    delete = tuple(rolled[: len(reasons)])
    start = manifest.log_start_offset
    if delete:
        last = delete[-1].next_offset
        assert last is not None
        start = max(start, last)
    held: list[str] = []
    if config.delete:
        kept = rolled[len(delete) :]
        n = sum(1 for s in kept[1:] if _expired(s, config, now_ms))
        if n:
            held.append(
                f"{n} segment(s) past retention.ms wait behind {kept[0].name} (newest "
                f"record at {kept[0].max_timestamp} ms, within retention.ms): retention "
                f"deletes a prefix of the log, as Kafka does"
            )
        if not kept and 0 <= config.retention_bytes < active_bytes:
            held.append(
                f"the active segment alone holds {active_bytes:,} bytes, over retention.bytes "
                f"({config.retention_bytes:,}): the active segment is never deleted; it goes "
                f"once it rolls (segment.bytes {config.segment_bytes:,}, segment.ms "
                f"{config.segment_ms:,})"
            )
    return RetentionPlan(delete, tuple(reasons), start, tuple(held))


# ---------------------------------------------------------------------------- compaction


@dataclass(frozen=True)
class CompactionPlan:
    """A partition's cleanable section and whether it is worth cleaning now."""

    section: tuple[SegmentInfo, ...]
    clean_bytes: int
    dirty_bytes: int
    dirty_segments: int
    tombstones_below: int
    tombstones_due: bool
    worth_cleaning: bool
    reason: str

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        if total == 0:
            return 1.0 if self.dirty_segments else 0.0
        return self.dirty_bytes / total

    @property
    def base_offset(self) -> int:
        return self.section[0].base_offset if self.section else -1

    @property
    def end_offset(self) -> int:
        """The first offset after the section (Kafka's first uncleanable offset)."""
        if not self.section:
            return -1
        end = self.section[-1].next_offset
        assert end is not None
        return end

    @property
    def records(self) -> int:
        return sum(s.records for s in self.section)


def cleanable_section(
    manifest: Manifest, config: TopicConfig, *, now_ms: int, stable_offset: int | None = None
) -> list[SegmentInfo]:
    section: list[SegmentInfo] = []
    newest_cleanable = now_ms - config.min_compaction_lag_ms
    for seg in _sealed_prefix(manifest):
        assert seg.next_offset is not None
        if seg.next_offset <= manifest.log_start_offset and not section:
            continue  # retention's to delete; rewriting it would only waste work
        if seg.max_timestamp != NO_TIMESTAMP and seg.max_timestamp > newest_cleanable:
            break
        if stable_offset is not None and seg.next_offset > stable_offset:
            break  # an open transaction's records may still be aborted (Kafka's rule)
        section.append(seg)
    return section


def plan_compaction(
    manifest: Manifest, config: TopicConfig, *, now_ms: int, stable_offset: int | None = None
) -> CompactionPlan:
    """The partition's cleanable section and the decision (see the module docstring).
    ``stable_offset``: the partition's last stable offset; the section ends before it."""
    if not config.compact:
        return CompactionPlan((), 0, 0, 0, 0, False, False, "cleanup.policy has no compact")
    section = cleanable_section(manifest, config, now_ms=now_ms, stable_offset=stable_offset)
    dirty = [s for s in section if s.generation == 0]
    clean = [s for s in section if s.generation > 0]
    below = tombstone_horizon(
        manifest.cleaned, now_ms=now_ms, delete_retention_ms=config.delete_retention_ms
    )
    due = any(s.first_tombstone is not None and s.first_tombstone < below for s in clean)
    plan = CompactionPlan(
        tuple(section),
        sum(s.size_bytes for s in clean),
        sum(s.size_bytes for s in dirty),
        len(dirty),
        below,
        due,
        False,
        "",
    )
    if not section and not _sealed_prefix(manifest):
        reason, worth = "no sealed segment yet (the active segment is never cleaned)", False
    elif not section:
        reason, worth = "no sealed segment is older than min.compaction.lag.ms", False
    elif dirty and any(
        s.min_timestamp != NO_TIMESTAMP and s.min_timestamp <= now_ms - config.max_compaction_lag_ms
        for s in dirty
    ):
        reason, worth = "a dirty record is older than max.compaction.lag.ms", True
    elif dirty and plan.dirty_ratio >= config.min_cleanable_dirty_ratio:
        reason, worth = (
            f"dirty ratio {plan.dirty_ratio:.2f} >= min.cleanable.dirty.ratio "
            f"{config.min_cleanable_dirty_ratio:g}",
            True,
        )
    elif due:
        reason, worth = "tombstones past delete.retention.ms", True
    elif not dirty:
        reason, worth = "nothing dirty", False
    else:
        reason, worth = (
            f"dirty ratio {plan.dirty_ratio:.2f} < min.cleanable.dirty.ratio "
            f"{config.min_cleanable_dirty_ratio:g}",
            False,
        )
    return CompactionPlan(
        plan.section,
        plan.clean_bytes,
        plan.dirty_bytes,
        plan.dirty_segments,
        below,
        due,
        worth,
        reason,
    )


@dataclass(frozen=True)
class OutputGroup:
    """Consecutive section segments rewritten into one new sealed segment ``name``."""

    inputs: tuple[SegmentInfo, ...]
    name: str
    estimated_bytes: int

    @property
    def base_offset(self) -> int:
        return self.inputs[0].base_offset

    @property
    def next_offset(self) -> int:
        end = self.inputs[-1].next_offset
        assert end is not None
        return end

    @property
    def records_in(self) -> int:
        return sum(s.records for s in self.inputs)


def next_generation(base_offset: int, inputs: Iterable[SegmentInfo], on_disk: Iterable[str]) -> int:
    """A generation that no file of ``base_offset`` has used: one above every input's and
    every file's on disk (orphans included), so a new file never replaces an old one and
    never reuses a name garbage collection may be deleting."""
    used = [s.generation for s in inputs if s.base_offset == base_offset]
    for name in on_disk:
        parsed = names.parse_segment_name(name)
        if parsed is not None and parsed.base_offset == base_offset:
            used.append(parsed.generation)
    generation = max(used, default=0) + 1
    if generation > MAX_GENERATION:
        raise ValueError(f"segment base offset {base_offset}: generations exhausted")
    return generation


def plan_groups(
    section: Iterable[SegmentInfo],
    kept: Mapping[str, int],
    *,
    segment_bytes: int,
    on_disk: Iterable[str] = (),
) -> tuple[OutputGroup, ...]:
    """Group ``section`` into outputs (see the module docstring); ``kept`` maps a segment
    name to the number of its records that survive (absent: none)."""
    on_disk = list(on_disk)
    runs: list[tuple[list[SegmentInfo], int]] = []
    for seg in section:
        keep = kept.get(seg.name, 0)
        est = seg.size_bytes * keep // seg.records if seg.records else 0
        if runs and (runs[-1][1] == 0 or est == 0 or runs[-1][1] + est <= segment_bytes):
            runs[-1][0].append(seg)
            runs[-1] = (runs[-1][0], runs[-1][1] + est)
        else:
            runs.append(([seg], est))
    groups = []
    for inputs, est in runs:
        base = inputs[0].base_offset
        gen = next_generation(base, inputs, on_disk)
        groups.append(OutputGroup(tuple(inputs), names.segment_name(base, generation=gen), est))
    return tuple(groups)
