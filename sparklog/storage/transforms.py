"""Every change to a partition's segment set, as a named manifest transform.

A transform is a callable ``Manifest -> Manifest | None`` given to ``ManifestStore.commit``,
which applies it to the latest version and creates the next one (create-if-absent), re-running
it on the new latest version when it loses a race. Returning None commits nothing; raising
aborts (``SegmentNotLiveError`` when an input was swapped out meanwhile, ``LeaseLostError``
when the writer's epoch is fenced). Transforms are pure: files are written before the
commit, never by a transform.

Who commits what (the partition's *writer* is the broker that leads it, or an offline tool
holding the data-dir lease; jobs are other processes that never call the writer):

==================  ==========  =================================================================
transform           committer   change
==================  ==========  =================================================================
``Roll``            writer      the active segment gets its end; a new empty one becomes active
``Rolled``          writer      (object storage) rolls not committed by themselves, carried by
                                the writer's next commit or found in the tail at open
``Seal``            writer      a rolled ``.arrow`` segment is replaced by its Parquet file
``EpochChange``     writer      a new leader epoch; an epoch below the manifest's is refused
``TakeOver``        new leader  (cluster mode, after its ``EpochChange``) the old active
                                segment is frozen at its recovered end (dropped if empty);
                                a new active segment named with the epoch follows it
``DeleteRecords``   writer      the log start offset advances (Kafka's DeleteRecords); rolled
                                segments wholly below it are dropped
``DropSegments``    retention   a prefix of segments chosen on the latest version is dropped
``Compact``         compaction  a section is swapped for its rewritten segments; ``cleaned``
                                marks (``manifest.updated_marks``) record when it was compacted
==================  ==========  =================================================================

The writer commits its transforms ``Fenced`` by its leader epoch: once a manifest carries a
newer epoch (another writer took the partition over), every commit of the old writer fails
with ``LeaseLostError``, re-checked on each retry of the commit. The jobs' transforms are
not fenced by leader epochs (a job is not a leader); they keep the manifest's epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sparklog.errors import LeaseLostError
from sparklog.storage.manifest import Manifest, SegmentInfo, updated_marks


class Transform(Protocol):
    """What ``ManifestStore.commit`` applies: the next manifest, None for no change."""

    def __call__(self, m: Manifest) -> Manifest | None: ...


@dataclass(frozen=True)
class Fenced:
    """``inner`` committed by the writer of leader epoch ``epoch``: refused with
    ``LeaseLostError`` once the manifest carries a newer epoch."""

    epoch: int
    inner: Transform
    label: str = ""

    def __call__(self, m: Manifest) -> Manifest | None:
        if m.leader_epoch > self.epoch:
            raise LeaseLostError(
                f"{self.label}: this writer's leader epoch {self.epoch} is fenced by epoch "
                f"{m.leader_epoch} (manifest version {m.version})"
            )
        return self.inner(m)


@dataclass(frozen=True)
class Roll:
    """``rolled`` (the active segment, now with its end and size) stays; ``active``, a new
    empty segment starting at that end, becomes the active one."""

    rolled: SegmentInfo
    active: SegmentInfo

    def __call__(self, m: Manifest) -> Manifest:
        return m.replace([self.rolled.name], [self.rolled, self.active])


@dataclass(frozen=True)
class Rolled:
    """``rolls``, then ``inner`` (None: nothing more). On object storage a roll commits no
    manifest version of its own: the writer keeps it (``sparklog.storage.rolls``) and its
    next commit, normally the seal of the rolled segment, carries it; a writer opening the
    partition commits the rolls that the committed tail shows (``recovery.open_partition``).
    A roll already in the manifest (its new segment is, or precedes, the active one) is
    skipped, so both may meet the same roll."""

    rolls: tuple[Roll, ...]
    inner: Transform | None = None

    def __call__(self, m: Manifest) -> Manifest | None:
        rolled = m
        for roll in self.rolls:
            if roll.active.base_offset > rolled.active.base_offset:
                rolled = roll(rolled)
        if self.inner is None:
            return None if rolled is m else rolled
        out = self.inner(rolled)
        return rolled if out is None and rolled is not m else out


@dataclass(frozen=True)
class TakeOver:
    """A cluster-mode leader of ``epoch`` takes the partition over: the active segment
    ``old_active`` becomes ``frozen`` (rolled, its end the longest valid prefix the new
    leader recovered; None drops an empty one) and ``active``, a new empty segment named
    with the epoch, follows it. Readers take a rolled segment's end from the manifest, so
    whatever a deposed leader appends to the old file afterwards is never read. Refused
    (``LeaseLostError``) unless the manifest is at ``epoch`` (the ``EpochChange`` came first,
    so no older leader commits any more) and ``old_active`` is still the active segment."""

    epoch: int
    old_active: str
    frozen: SegmentInfo | None
    active: SegmentInfo
    label: str = ""

    def __call__(self, m: Manifest) -> Manifest:
        if m.leader_epoch != self.epoch or m.active.name != self.old_active:
            raise LeaseLostError(
                f"{self.label}: take-over at epoch {self.epoch} of {self.old_active} refused: "
                f"manifest version {m.version} is at epoch {m.leader_epoch}, active "
                f"{m.active.name}"
            )
        frozen = [self.frozen] if self.frozen is not None else []
        return m.replace([self.old_active], [*frozen, self.active])


@dataclass(frozen=True)
class Seal:
    """The rolled segment ``rolled_name`` is replaced by ``sealed``, its Parquet file."""

    rolled_name: str
    sealed: SegmentInfo

    def __call__(self, m: Manifest) -> Manifest:
        return m.replace([self.rolled_name], [self.sealed])


@dataclass(frozen=True)
class EpochChange:
    """The partition's writer now leads under ``epoch``. An epoch below the manifest's is
    fenced (a newer leader committed since); the same epoch again commits nothing."""

    epoch: int
    label: str = ""

    def __call__(self, m: Manifest) -> Manifest | None:
        if self.epoch < m.leader_epoch:
            raise LeaseLostError(
                f"{self.label}: leader epoch {self.epoch} is fenced by epoch {m.leader_epoch} "
                f"(manifest version {m.version})"
            )
        if self.epoch == m.leader_epoch:
            return None
        return dataclasses.replace(m, leader_epoch=self.epoch)


@dataclass(frozen=True)
class DeleteRecords:
    """The log start offset moves up to ``before_offset`` (never down), and the rolled
    segments wholly below it, sealed or not, are dropped in the same version (their files
    go after ``file.delete.delay.ms``; retention would drop them at its next run anyway)."""

    before_offset: int

    def __call__(self, m: Manifest) -> Manifest | None:
        if self.before_offset <= m.log_start_offset:
            return None
        below = [
            s.name
            for s in m.segments[:-1]
            if s.next_offset is not None and s.next_offset <= self.before_offset
        ]
        return m.replace(below, [], log_start_offset=self.before_offset)


@dataclass(frozen=True)
class DropSegments:
    """The segments ``choose`` picks on the latest version (a prefix: retention's plan) are
    dropped; the log start offset follows. Choosing on the latest version means a lost race
    re-plans instead of conflicting."""

    choose: Callable[[Manifest], Sequence[SegmentInfo]]

    def __call__(self, m: Manifest) -> Manifest | None:
        chosen = self.choose(m)
        if not chosen:
            return None
        return m.replace([s.name for s in chosen], [])


@dataclass(frozen=True)
class Compact:
    """The section ``inputs`` (still live, else ``SegmentNotLiveError``) is swapped for
    ``outputs``, which cover exactly its offsets; the ``cleaned`` marks record that offsets
    below ``end_offset`` were compacted at ``now_ms``."""

    inputs: tuple[str, ...]
    outputs: tuple[SegmentInfo, ...]
    end_offset: int
    now_ms: int
    delete_retention_ms: int

    def __call__(self, m: Manifest) -> Manifest:
        nxt = m.replace(self.inputs, self.outputs)
        marks = updated_marks(
            m.cleaned,
            end_offset=self.end_offset,
            now_ms=self.now_ms,
            delete_retention_ms=self.delete_retention_ms,
            first_offset=nxt.segments[0].base_offset,
        )
        return dataclasses.replace(nxt, cleaned=marks)
