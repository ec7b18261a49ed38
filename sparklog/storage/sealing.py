"""Sealing rolled segments into Parquet: ``Sealer`` seals one partition's rolled segments,
on the shared background sealer or when the log's ``roll``/``open`` ask for it.

Seal of a rolled segment A (crash points in brackets; what ``PartitionLog.open`` does after
a crash there):
  0. skip A if the latest manifest no longer names it (retention dropped it: a rolled
     segment is as deletable as a sealed one) or it lies wholly below the log start
     offset (retention's to drop)           [seal.before_write: nothing written; the seal
                                             is redone on open]
  1. write ``A.parquet`` + indexes, fsynced         [seal.after_write: orphan, deleted on open,
     (on an object store: ``A.parquet`` alone,        then the seal is redone]
     one PUT; ``sealed.separate_indexes``)
  2. commit ``Seal``: A.arrow replaced by A.parquet [seal.after_commit: A.arrow is garbage,
                                                     deleted after file.delete.delay.ms]
     If retention dropped A between 0 and 2, the commit is refused (``Seal`` replaces only a
     live segment, so a dropped segment is never resurrected) and ``A.parquet``, which no
     manifest ever named, is deleted       [seal.refused: the retention commit stands;
                                             ``A.parquet`` is an orphan, deleted on open]

The log owns its ``Sealer`` and hands it everything it uses, explicitly: the partition's
directory, the row-group size and the leader epoch that names new files, ``latest`` (the
log's ``refresh``: the newest manifest) and ``commit`` (the log's fenced commit of a
writer's transform, which also makes the result the log's manifest). The sealer keeps its
own state: one seal at a time, and the background seals it started.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from sparklog.errors import SegmentNotLiveError
from sparklog.storage import crashpoints, names, transforms
from sparklog.storage.manifest import Manifest, SegmentInfo
from sparklog.storage.producers import ProducerStates, write_snapshot
from sparklog.storage.sealed import (
    PRODUCER_STATE_KEY,
    background_sealer,
    seal_rolled,
    separate_indexes,
)

if TYPE_CHECKING:
    from sparklog.storage.fs import FileSystem

log = logging.getLogger("sparklog.storage.log")
crashpoints.register("seal.before_write", "seal.after_write", "seal.refused", "seal.after_commit")


class Sealer:
    """Seals one partition's rolled segments (see the module docstring). Thread-safe: seals
    run one at a time; ``seal_in_background`` and ``wait`` may be called from any thread."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        label: str,
        *,
        row_group_rows: int,
        epoch: int | None,
        latest: Callable[[], Manifest],
        commit: Callable[[transforms.Transform], Manifest],
    ) -> None:
        self._fs = fs
        self._path = path
        self._label = label
        self._row_group_rows = row_group_rows
        self._epoch = epoch
        self._latest = latest
        self._commit = commit
        self._seal_lock = threading.Lock()  # one seal at a time
        self._lock = threading.Lock()  # guards _seals and _snapshots
        self._seals: list[Future[list[str]]] = []
        #: object store: rolled segment -> the producer snapshot its footer is to carry
        self._snapshots: dict[str, bytes] = {}

    def snapshot_at_roll(self, name: str, states: ProducerStates) -> None:
        """The producer state as the rolled segment ``name`` ends: the snapshot file on a
        local root; on an object store kept for the footer of ``name``'s Parquet file
        (``sealed.PRODUCER_STATE_KEY``), so the snapshot costs no PUT of its own. A seal
        after a restart has none to carry: the next one does."""
        if separate_indexes(self._fs):
            write_snapshot(self._fs, self._path, states)
            return
        data = states.to_json()
        with self._lock:
            self._snapshots[name] = data

    def snapshot_frozen(self, manifest: Manifest, end: int, states: ProducerStates) -> None:
        """``states`` as a just-opened log rebuilt them, at ``end``: the state at the end
        of the newest segment awaiting its seal if that segment ends there (the segment a
        take-over froze, or the last roll found in the tail), whose seal then carries it
        (``snapshot_at_roll``). Without it that footer holds no snapshot (the old leader's
        was in its memory) and the next take-over replays from an older footer."""
        pending = manifest.unsealed_rolled
        if pending and pending[-1].next_offset == end:
            self.snapshot_at_roll(pending[-1].name, states)

    def seal_in_background(self) -> None:
        """Run ``seal_pending`` on the shared background sealer."""

        def run() -> list[str]:
            try:
                return self.seal_pending()
            except FileNotFoundError:
                if self._fs.exists(self._path):
                    log.exception("%s: sealing failed", self._label)
                    raise
                # the partition's directory is gone (its topic was deleted): nothing to seal
                log.info("%s: sealing abandoned: %s no longer exists", self._label, self._path)
                return []
            except Exception:
                # the segment stays rolled and readable as .arrow; the next roll or open
                # seals it again
                log.exception("%s: sealing failed", self._label)
                raise

        with self._lock:
            self._seals = [f for f in self._seals if not f.done()]
            self._seals.append(background_sealer().submit(run))

    def pending(self) -> list[Future[list[str]]]:
        """The background seals started so far."""
        with self._lock:
            return list(self._seals)

    def wait(self) -> None:
        """Wait for background seals started so far (exceptions are re-raised)."""
        for f in self.pending():
            f.result()

    def seal_pending(self) -> list[str]:
        """Seal every rolled segment into Parquet (the steps in the module
        docstring); returns the names of the new files."""
        sealed = []
        with self._seal_lock:
            for info in self._latest().unsealed_rolled:
                name = self._seal(info)
                if name is not None:
                    sealed.append(name)
        return sealed

    def _still_to_seal(self, info: SegmentInfo) -> bool:
        latest = self._latest()
        assert info.next_offset is not None
        return latest.find(info.name) is not None and info.next_offset > latest.log_start_offset

    def _drop_below_start(self) -> None:
        """Drop rolled segments wholly below the log start (a DeleteRecords up to the end
        of the segment that was active then leaves one behind once it rolls)."""

        def below(m: Manifest) -> list[SegmentInfo]:
            start = m.log_start_offset
            return [
                s for s in m.segments[:-1] if s.next_offset is not None and s.next_offset <= start
            ]

        self._commit(transforms.DropSegments(below))

    def _seal(self, info: SegmentInfo) -> str | None:
        """Seal ``info`` (``_seal_once``); its kept producer snapshot is let go once the
        segment is sealed, dropped or refused (a failure keeps it for the next try)."""
        name = self._seal_once(info)
        with self._lock:
            self._snapshots.pop(info.name, None)
        return name

    def _seal_once(self, info: SegmentInfo) -> str | None:
        crashpoints.hit("seal.before_write")
        if not self._still_to_seal(info):
            log.debug("%s: %s is below the log start: dropped, not sealed", self._label, info.name)
            self._drop_below_start()
            return None
        with self._lock:
            snapshot = self._snapshots.get(info.name)
        try:
            sealed = seal_rolled(
                self._fs,
                self._path,
                info,
                row_group_rows=self._row_group_rows,
                epoch=self._epoch,
                footer=None if snapshot is None else {PRODUCER_STATE_KEY: snapshot},
            )
        except FileNotFoundError:
            if self._still_to_seal(info):
                raise
            return None  # dropped, and its file collected, while it was being read
        crashpoints.hit("seal.after_write")
        try:
            self._commit(transforms.Seal(info.name, sealed))
        except SegmentNotLiveError:
            crashpoints.hit("seal.refused")
            written = names.segment_files(sealed.name)
            for n in written if separate_indexes(self._fs) else written[:1]:
                self._fs.delete(self._fs.join(self._path, n))
            self._latest()
            log.info(
                "%s: %s was dropped by retention while it was being sealed; its "
                "Parquet file is deleted",
                self._label,
                info.name,
            )
            return None
        crashpoints.hit("seal.after_commit")
        return sealed.name
