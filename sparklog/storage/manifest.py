"""The versioned manifest: the one source of truth for a partition's live segments.

Files: ``<partition>/manifest/<version>.json`` (``names.version_name``), each a complete
description of the partition at that version::

    {"format": 1, "version": 7, "log_start_offset": 0, "committed_ms": ..., "writer": "...",
     "leader_epoch": 3,
     "segments": [{"name": "00000000000000000000.parquet", "base_offset": 0,
                   "next_offset": 1000, "records": 1000, "size_bytes": 81234,
                   "min_timestamp": ..., "max_timestamp": ..., "created_ms": ...,
                   "first_tombstone": null}, ...],
     "cleaned": [[5000, 1700000000000], ...]}

Record counts, sizes and timestamps are exact for sealed segments; a rolled ``.arrow``
segment records its size, end and max timestamp (min is filled in when it is sealed).
``first_tombstone`` is written by compaction (``sparklog.compaction``): the offset of the
first tombstone (null value) a compacted segment kept, null if it kept none (and always
null for segments compaction never rewrote). ``cleaned`` is compaction's history, Kafka's
cleaner checkpoint made part of the segment set: ``[end_offset, cleaned_ms]`` pairs, end
offsets increasing, meaning "offsets below ``end_offset`` were first compacted at or before
``cleaned_ms``"; a tombstone may be removed once ``delete.retention.ms`` has passed since
then. ``leader_epoch`` is the epoch of the partition's writer (leader) that committed the
latest ``EpochChange`` (``sparklog.storage.transforms``): a writer whose epoch is below it
is fenced. These three keys are optional (older manifests load with none; epoch -1).
How each kind of change transforms a manifest is ``sparklog.storage.transforms``;
``updated_marks`` and ``tombstone_horizon`` are the rules of the ``cleaned`` history.

Invariants (checked on every read and commit): segments are sorted by base offset and
contiguous (each ``next_offset`` is the next segment's ``base_offset``; compaction leaves
gaps *inside* segments, never between them); the last segment is the active one (``.arrow``,
``next_offset`` null: its end is the high-watermark checkpoint); other ``.arrow`` segments
are rolled and awaiting sealing; ``log_start_offset`` is not below the first segment
(DeleteRecords may move it further; retention then drops the segments wholly below it).

Commit protocol (optimistic concurrency, as Delta Lake's log): a writer reads the latest
version ``v``, computes the next state, and creates ``v + 1`` with create-if-absent
(``FileSystem.create_exclusive``) - never overwrite, never rename. Losing the race means
someone else committed ``v + 1``: the writer re-reads, re-checks that its inputs are still
live (``SegmentNotLiveError`` otherwise) and retries. Crash points: before the create,
nothing changed (new files are orphans); after it, the change is whole. Files that the
latest version does not name are garbage (``sparklog.storage.gc``), removed after a delay
so that readers holding an older version finish.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sparklog.errors import CorruptMetadataError, ManifestConflictError, SegmentNotLiveError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem
from sparklog.storage.versioned import VersionedFiles

FORMAT = 1
NO_TIMESTAMP = -(2**63)
MAX_COMMIT_ATTEMPTS = 50
#: The longest ``cleaned`` history kept in a manifest; older marks are merged (safely:
#: merging only ever makes a tombstone wait longer).
MAX_CLEAN_MARKS = 64


@dataclass(frozen=True)
class SegmentInfo:
    """One live segment as the manifest records it."""

    name: str
    base_offset: int
    next_offset: int | None
    records: int = 0
    size_bytes: int = 0
    min_timestamp: int = NO_TIMESTAMP
    max_timestamp: int = NO_TIMESTAMP
    created_ms: int = 0
    first_tombstone: int | None = None

    @property
    def parsed(self) -> names.SegmentName:
        parsed = names.parse_segment_name(self.name)
        if parsed is None:
            raise CorruptMetadataError(f"manifest names a non-segment file {self.name!r}")
        return parsed

    @property
    def sealed(self) -> bool:
        return self.parsed.kind == names.SEALED_KIND

    @property
    def active(self) -> bool:
        return self.next_offset is None

    @property
    def generation(self) -> int:
        return self.parsed.generation

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SegmentInfo:
        return cls(**d)


@dataclass(frozen=True)
class CleanMark:
    """Offsets below ``end_offset`` were first compacted at or before ``cleaned_ms``."""

    end_offset: int
    cleaned_ms: int


@dataclass(frozen=True)
class Manifest:
    """One committed manifest version (format and invariants in the module docstring)."""

    version: int
    log_start_offset: int
    segments: tuple[SegmentInfo, ...]
    committed_ms: int = 0
    writer: str = ""
    cleaned: tuple[CleanMark, ...] = ()
    leader_epoch: int = -1

    @property
    def active(self) -> SegmentInfo:
        return self.segments[-1]

    @property
    def unsealed_rolled(self) -> list[SegmentInfo]:
        return [s for s in self.segments[:-1] if not s.sealed]

    def names(self) -> set[str]:
        return {s.name for s in self.segments}

    def find(self, name: str) -> SegmentInfo | None:
        return next((s for s in self.segments if s.name == name), None)

    def validate(self, where: str = "") -> Manifest:
        def bad(msg: str) -> CorruptMetadataError:
            return CorruptMetadataError(f"manifest {where or self.version}: {msg}")

        if not self.segments:
            raise bad("no segments")
        for i, seg in enumerate(self.segments):
            last = i == len(self.segments) - 1
            if seg.active != last:
                raise bad(f"segment {seg.name}: only the last segment may be open-ended")
            if last and seg.sealed:
                raise bad(f"the last segment {seg.name} must be an active .arrow segment")
            if seg.parsed.base_offset != seg.base_offset:
                raise bad(f"segment {seg.name} records base offset {seg.base_offset}")
            if seg.next_offset is not None and seg.next_offset < seg.base_offset:
                raise bad(f"segment {seg.name} ends ({seg.next_offset}) before it starts")
            if i and self.segments[i - 1].next_offset != seg.base_offset:
                raise bad(f"segments {self.segments[i - 1].name} and {seg.name} are not contiguous")
        if self.log_start_offset < self.segments[0].base_offset:
            raise bad(
                f"log start offset {self.log_start_offset} is below the first segment "
                f"{self.segments[0].name}"
            )
        for a, b in itertools.pairwise(self.cleaned):
            if b.end_offset <= a.end_offset or b.cleaned_ms < a.cleaned_ms:
                raise bad(f"cleaned marks {a} and {b} are out of order")
        return self

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "version": self.version,
            "log_start_offset": self.log_start_offset,
            "committed_ms": self.committed_ms,
            "writer": self.writer,
            "leader_epoch": self.leader_epoch,
            "segments": [s.to_dict() for s in self.segments],
            "cleaned": [[c.end_offset, c.cleaned_ms] for c in self.cleaned],
        }
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        try:
            d = json.loads(data)
            if d.get("format") != FORMAT:
                raise CorruptMetadataError(f"{where}: unknown manifest format {d.get('format')}")
            m = cls(
                version=int(d["version"]),
                log_start_offset=int(d["log_start_offset"]),
                segments=tuple(SegmentInfo.from_dict(s) for s in d["segments"]),
                committed_ms=int(d.get("committed_ms", 0)),
                writer=str(d.get("writer", "")),
                cleaned=tuple(CleanMark(int(e), int(t)) for e, t in d.get("cleaned", ())),
                leader_epoch=int(d.get("leader_epoch", -1)),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where}: unreadable manifest: {e}") from e
        return m.validate(where)

    def replace(
        self,
        old: Iterable[str],
        new: Iterable[SegmentInfo],
        *,
        log_start_offset: int | None = None,
    ) -> Manifest:
        """The next state with segments ``old`` swapped for ``new`` (SegmentNotLiveError if
        any of ``old`` is gone). Removing a prefix advances the log start offset."""
        old = list(old)
        live = self.names()
        gone = [n for n in old if n not in live]
        if gone:
            raise SegmentNotLiveError(
                f"segments {gone} are no longer live (version {self.version})"
            )
        keep = [s for s in self.segments if s.name not in set(old)]
        segments = tuple(sorted([*keep, *new], key=lambda s: s.base_offset))
        start = self.log_start_offset if log_start_offset is None else log_start_offset
        if segments:
            start = max(start, segments[0].base_offset)
        return dataclasses.replace(self, segments=segments, log_start_offset=start)


# ---------------------------------------------------------------------------- cleaned marks


def tombstone_horizon(marks: Iterable[CleanMark], *, now_ms: int, delete_retention_ms: int) -> int:
    """Tombstones at offsets below the returned offset may be removed now (0: none)."""
    return max(
        (m.end_offset for m in marks if m.cleaned_ms + delete_retention_ms <= now_ms), default=0
    )


def updated_marks(
    marks: Iterable[CleanMark],
    *,
    end_offset: int,
    now_ms: int,
    delete_retention_ms: int,
    first_offset: int,
    limit: int = MAX_CLEAN_MARKS,
) -> tuple[CleanMark, ...]:
    """The ``cleaned`` marks after a compaction at ``now_ms`` of a section ending at
    ``end_offset``, in a log whose first segment starts at ``first_offset``.

    Marks already past ``delete.retention.ms`` were swept by this compaction (its tombstone
    horizon covered them) and merge into one; marks wholly below the log are dropped; past
    ``limit``, the two neighbours closest in time merge into the later one (a tombstone
    then waits a little longer, never less).
    """
    out = [m for m in marks if m.end_offset > first_offset]
    if not out or end_offset > out[-1].end_offset:
        # never earlier than the last mark: another machine's clock may run ahead of ours
        out.append(CleanMark(end_offset, max(now_ms, out[-1].cleaned_ms if out else now_ms)))
    expired = [m for m in out if m.cleaned_ms + delete_retention_ms <= now_ms]
    if len(expired) > 1:
        out = [expired[-1], *out[len(expired) :]]
    while len(out) > limit:
        i = min(range(len(out) - 1), key=lambda j: out[j + 1].cleaned_ms - out[j].cleaned_ms)
        out[i : i + 2] = [out[i + 1]]
    return tuple(out)


class ManifestStore:
    """Reads and commits a partition's manifest versions."""

    def __init__(
        self,
        fs: FileSystem,
        partition_path: str,
        *,
        writer: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fs = fs
        self.files = VersionedFiles(fs, names.manifest_dir(partition_path))
        self.writer = writer
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def latest(self) -> Manifest | None:
        found = self.files.latest()
        if found is None:
            return None
        version, data = found
        m = Manifest.from_json(data, self.files.path(version))
        if m.version != version:
            raise CorruptMetadataError(f"{self.files.path(version)} says it is version {m.version}")
        return m

    def read(self, version: int) -> Manifest:
        return Manifest.from_json(self.files.read(version), self.files.path(version))

    def superseding(self, version: int, epoch: int) -> Manifest | None:
        """The latest manifest if it carries a leader epoch above ``epoch`` and came after
        ``version``; None otherwise. One ``exists`` call (a HEAD on an object store) when
        nothing came after."""
        if not self.files.exists(version + 1):
            return None
        latest = self.latest()
        return latest if latest is not None and latest.leader_epoch > epoch else None

    def create_initial(self, initial: Manifest) -> Manifest:
        """Commit version 0 unless some version exists; return the latest either way."""
        m = dataclasses.replace(initial, version=0, committed_ms=self._now_ms(), writer=self.writer)
        m.validate()
        self.files.fs.makedirs(self.files.directory)
        if self.files.try_commit(0, m.to_json()):
            return m
        latest = self.latest()
        assert latest is not None
        return latest

    def commit(
        self, transform: Callable[[Manifest], Manifest | None], *, current: Manifest | None = None
    ) -> Manifest:
        """Apply ``transform`` to the latest version and commit the result as the next one.

        ``transform`` may raise (for instance SegmentNotLiveError) to abort, or return None
        to commit nothing. It is re-run on the new latest version after a lost race.

        ``current``: a version the caller read a moment ago, tried first instead of
        reading the latest (2 GETs on an object store). Only a commit trusts it: versions
        are contiguous, so winning ``current.version + 1`` proves ``current`` was the
        latest. A lost race, or a transform that raises or commits nothing on it, is
        decided again on the latest version read anew.
        """
        hint = current
        for _ in range(MAX_COMMIT_ATTEMPTS):
            if hint is not None:
                current, hint = hint, None
                try:
                    nxt = transform(current)
                except Exception:  # decided on a version that may be stale: decide anew
                    continue
                if nxt is None:
                    continue
            else:
                current = self.latest()
                if current is None:
                    raise CorruptMetadataError(f"{self.files.directory}: no manifest to update")
                nxt = transform(current)
                if nxt is None:
                    return current
            nxt = dataclasses.replace(
                nxt, version=current.version + 1, committed_ms=self._now_ms(), writer=self.writer
            ).validate()
            if self.files.try_commit(nxt.version, nxt.to_json()):
                return nxt
        raise ManifestConflictError(
            f"{self.files.directory}: lost {MAX_COMMIT_ATTEMPTS} commit races in a row"
        )
