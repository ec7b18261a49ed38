"""Sealing rolled segments into Parquet: the part of ``PartitionLog`` (``SealingMixin``)
that runs the seal steps of ``sparklog.storage.log``'s module docstring, on the shared
background sealer or when ``roll``/``open`` ask for it.

The mixin uses the log's own state: ``_lock`` (appends and the manifest), ``_seal_lock``
(one seal at a time), ``_seals`` (background seals), ``_row_group_rows``,
``_segment_epoch``, ``refresh`` and ``_commit_fenced``.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from sparklog.errors import SegmentNotLiveError
from sparklog.storage import crashpoints, names, transforms
from sparklog.storage.manifest import Manifest, SegmentInfo
from sparklog.storage.sealed import background_sealer, seal_rolled

if TYPE_CHECKING:
    from sparklog.storage.fs import FileSystem

log = logging.getLogger("sparklog.storage.log")
crashpoints.register("seal.before_write", "seal.after_write", "seal.refused", "seal.after_commit")


class SealingMixin:
    """See the module docstring."""

    fs: FileSystem
    path: str
    label: str
    _lock: threading.RLock
    _seal_lock: threading.Lock
    _seals: list[Future[list[str]]]
    _row_group_rows: int
    _segment_epoch: int | None
    _manifest: Manifest

    def refresh(self) -> Manifest:  # pragma: no cover - PartitionLog's
        raise NotImplementedError

    def _commit_fenced(self, transform: transforms.Transform) -> Manifest:  # pragma: no cover
        raise NotImplementedError

    def _seal_in_background(self) -> None:
        def run() -> list[str]:
            try:
                return self.seal_pending()
            except FileNotFoundError:
                if self.fs.exists(self.path):
                    log.exception("%s: sealing failed", self.label)
                    raise
                # the partition's directory is gone (its topic was deleted): nothing to seal
                log.info("%s: sealing abandoned: %s no longer exists", self.label, self.path)
                return []
            except Exception:
                # the segment stays rolled and readable as .arrow; the next roll or open
                # seals it again
                log.exception("%s: sealing failed", self.label)
                raise

        with self._lock:
            self._seals = [f for f in self._seals if not f.done()]
            self._seals.append(background_sealer().submit(run))

    def wait_sealed(self) -> None:
        """Wait for background seals started so far (exceptions are re-raised)."""
        with self._lock:
            pending = list(self._seals)
        for f in pending:
            f.result()

    def seal_pending(self) -> list[str]:
        """Seal every rolled segment into Parquet (steps in the module docstring); returns
        the names of the new files."""
        sealed = []
        with self._seal_lock:
            for info in self.refresh().unsealed_rolled:
                name = self._seal(info)
                if name is not None:
                    sealed.append(name)
        return sealed

    def _still_to_seal(self, info: SegmentInfo) -> bool:
        latest = self.refresh()
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

        with self._lock:
            self._manifest = self._commit_fenced(transforms.DropSegments(below))

    def _seal(self, info: SegmentInfo) -> str | None:
        crashpoints.hit("seal.before_write")
        if not self._still_to_seal(info):
            log.debug("%s: %s is below the log start: dropped, not sealed", self.label, info.name)
            self._drop_below_start()
            return None
        try:
            sealed = seal_rolled(
                self.fs,
                self.path,
                info,
                row_group_rows=self._row_group_rows,
                epoch=self._segment_epoch,
            )
        except FileNotFoundError:
            if self._still_to_seal(info):
                raise
            return None  # dropped, and its file collected, while it was being read
        crashpoints.hit("seal.after_write")
        try:
            with self._lock:
                self._manifest = self._commit_fenced(transforms.Seal(info.name, sealed))
        except SegmentNotLiveError:
            crashpoints.hit("seal.refused")
            for n in (sealed.name, names.offset_index_name(sealed.name),
                      names.time_index_name(sealed.name)):  # fmt: skip
                self.fs.delete(self.fs.join(self.path, n))
            self.refresh()
            log.info("%s: %s was dropped by retention while it was being sealed; its "
                     "Parquet file is deleted", self.label, info.name)  # fmt: skip
            return None
        crashpoints.hit("seal.after_commit")
        return sealed.name
