"""Leader epochs of the writer: the part of ``PartitionLog`` (``EpochsMixin``) that bumps
its epoch, answers OffsetForLeaderEpoch, and notices another writer.

**Another writer.** Every writer that opens a partition commits a leader epoch above the
manifest's (``EpochChange``: an embedded broker at each start, a cluster leader at its
take-over), and the jobs' commits keep the manifest's epoch. So a manifest whose epoch is
above this writer's means another writer opened the partition. Two checks look for one:

- before every acknowledgement: each group-commit round, after its fsync (and after the
  cluster fence), looks for the manifest version after the one this writer knows - one
  ``exists`` call - and, only if there is one, reads the latest and compares its epoch.
  A round that finds a newer epoch acknowledges nothing. The records of a round that
  found none were fsynced before the other writer committed its epoch, and a take-over
  recovers the old segment only after committing its epoch, so it keeps them.
- ``refresh`` (every ``manifest_refresh_ms`` in a broker) compares the same epochs.

Without a fence (embedded mode: this process is the root's only writer) a newer epoch is
a foreign writer: the log keeps a ``ForeignWriterError`` and from then on refuses every
append and round, collects no garbage and writes nothing at close (``superseded``).
With a fence (cluster mode) a newer epoch is normally the next leader: the round fails
with ``LeaseLostError`` and the broker's assignments decide the rest. ``fence_writes``
lets the owner of the log (the broker) stop it for a reason of its own.

The mixin uses the log's own state: ``_lock``, ``_store``, ``_manifest``, ``_epoch``,
``_fence``, ``_commit``, ``_superseded``, ``fs``, ``path``, ``label`` and ``high_watermark``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparklog.errors import ForeignWriterError, LeaseLostError
from sparklog.storage import checkpoints, transforms
from sparklog.storage.manifest import Manifest, ManifestStore

if TYPE_CHECKING:
    from sparklog.storage.durability import GroupCommit
    from sparklog.storage.fs import FileSystem

log = logging.getLogger("sparklog.storage.log")


class EpochsMixin:
    """See the module docstring."""

    fs: FileSystem
    path: str
    label: str
    _lock: threading.RLock
    _store: ManifestStore
    _manifest: Manifest
    _epoch: int
    _fence: Callable[[], None] | None
    _commit: GroupCommit
    _superseded: ForeignWriterError | None

    @property
    def high_watermark(self) -> int:  # pragma: no cover - PartitionLog's
        raise NotImplementedError

    @property
    def log_end_offset(self) -> int:  # pragma: no cover - PartitionLog's
        raise NotImplementedError

    def leader_epochs(self) -> list[tuple[int, int]]:
        return checkpoints.read_leader_epochs(self.fs, self.path)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer (``checkpoints.end_offset_for_epoch``)."""
        return checkpoints.end_offset_for_epoch(self.leader_epochs(), epoch, self.high_watermark)

    def bump_leader_epoch(self) -> int:
        """Start a new leader epoch at the log end offset; returns it. The epoch is
        committed to the manifest (``EpochChange``; the commits of a writer of an older
        epoch are refused from then on, ``Fenced``) before the leader-epoch cache records
        where it starts."""
        with self._lock:
            epochs = self.leader_epochs()
            epoch = max(epochs[-1][0] if epochs else -1, self._manifest.leader_epoch) + 1
            self._manifest = self._store.commit(transforms.EpochChange(epoch, self.label))
            self._epoch = epoch
            checkpoints.write_leader_epochs(
                self.fs, self.path, [*epochs[-99:], (epoch, self.log_end_offset)]
            )
            return epoch

    @property
    def superseded(self) -> ForeignWriterError | None:
        """Why this log no longer acknowledges anything (see the module docstring)."""
        return self._superseded

    def fence_writes(self, error: ForeignWriterError) -> None:
        """Stop acknowledging: appends and group-commit rounds fail with ``error`` from now
        on, and appends waiting for durability fail with it now."""
        with self._lock:
            if self._superseded is None:
                self._superseded = error
        self._commit.fail_waiting(error)

    def _check_superseded(self) -> None:
        """A group-commit round's check (module docstring): raises if another writer
        committed a newer epoch."""
        if self._superseded is not None:
            raise self._superseded
        newer = self._store.superseding(self._manifest.version, self._epoch)
        if newer is not None:
            raise self._note_newer(newer) or LeaseLostError(self._newer_message(newer))

    def _note_newer(self, latest: Manifest) -> ForeignWriterError | None:
        """Keep (and return) a ``ForeignWriterError`` if ``latest`` shows another writer
        and this log has no fence; None otherwise."""
        if latest.leader_epoch <= self._epoch or self._fence is not None:
            return None
        error = ForeignWriterError(self._newer_message(latest))
        with self._lock:
            if self._superseded is None:
                self._superseded = error
                log.error("%s; this log acknowledges no more writes", error)
        return self._superseded

    def _newer_message(self, latest: Manifest) -> str:
        return (
            f"{self.label}: another writer ({latest.writer or '?'}) committed leader epoch "
            f"{latest.leader_epoch} (manifest version {latest.version}) above this writer's "
            f"{self._epoch}"
        )
