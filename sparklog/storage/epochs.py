"""Leader epochs of the writer: ``WriterEpochs``, the object a ``PartitionLog`` holds (as
``log.epochs``) that bumps its epoch, answers OffsetForLeaderEpoch, and notices another
writer.

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

Who writes what: the leader-epoch cache (``leader-epoch.json``) and the ``EpochChange``
manifest version are written only in ``bump``, which the log calls under its own lock
and whose result becomes the log's manifest; everything else here only reads the
manifest store and keeps ``superseded``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sparklog.errors import ForeignWriterError, LeaseLostError
from sparklog.storage import checkpoints, transforms
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import Manifest, ManifestStore

log = logging.getLogger("sparklog.storage.log")


class WriterEpochs:
    """A writer's leader epoch and its watch for another writer (module docstring).

    Inputs: the partition's directory (``fs``, ``path``; ``label`` names it in messages),
    its ``store`` of manifest versions, the ``epoch`` the log opened at, whether a fence
    (cluster mode) stands behind the log (``fenced``), and ``fail_waiting``: the group
    commit's, which fails the appends waiting for durability."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        label: str,
        store: ManifestStore,
        epoch: int,
        *,
        fenced: bool,
        fail_waiting: Callable[[Exception], None],
    ) -> None:
        self._fs = fs
        self._path = path
        self._label = label
        self._store = store
        self._fenced = fenced
        self._fail_waiting = fail_waiting
        self._lock = threading.Lock()
        self.epoch = epoch
        #: why the log no longer acknowledges anything (module docstring), or None
        self.superseded: ForeignWriterError | None = None

    def leader_epochs(self) -> list[tuple[int, int]]:
        return checkpoints.read_leader_epochs(self._fs, self._path)

    def end_offset_for_epoch(self, epoch: int, high_watermark: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer (``checkpoints.end_offset_for_epoch``)."""
        return checkpoints.end_offset_for_epoch(self.leader_epochs(), epoch, high_watermark)

    def bump(self, manifest: Manifest, log_end_offset: int) -> Manifest:
        """Start a new leader epoch at ``log_end_offset`` above ``manifest``'s and the
        cache's; returns the committed manifest. The epoch is committed (``EpochChange``;
        the commits of a writer of an older epoch are refused from then on, ``Fenced``)
        before the leader-epoch cache records where it starts. The caller holds the log's
        lock and takes the result as its manifest."""
        epochs = self.leader_epochs()
        epoch = max(epochs[-1][0] if epochs else -1, manifest.leader_epoch) + 1
        committed = self._store.commit(transforms.EpochChange(epoch, self._label))
        self.epoch = epoch
        checkpoints.write_leader_epochs(
            self._fs, self._path, [*epochs[-99:], (epoch, log_end_offset)]
        )
        return committed

    def fenced(self, transform: transforms.Transform) -> transforms.Fenced:
        """``transform``, refused once a newer leader epoch than this writer's committed."""
        return transforms.Fenced(self.epoch, transform, self._label)

    def fence_writes(self, error: ForeignWriterError) -> None:
        """Stop acknowledging: appends and group-commit rounds fail with ``error`` from now
        on, and appends waiting for durability fail with it now."""
        with self._lock:
            if self.superseded is None:
                self.superseded = error
        self._fail_waiting(error)

    def check(self, known_version: int) -> None:
        """A group-commit round's check (module docstring), ``known_version`` being the
        log's manifest version: raises if another writer committed a newer epoch."""
        if self.superseded is not None:
            raise self.superseded
        newer = self._store.superseding(known_version, self.epoch)
        if newer is not None:
            raise self.note_newer(newer) or LeaseLostError(self._newer_message(newer))

    def note_newer(self, latest: Manifest) -> ForeignWriterError | None:
        """Keep (and return) a ``ForeignWriterError`` if ``latest`` shows another writer
        and the log has no fence; None otherwise."""
        if latest.leader_epoch <= self.epoch or self._fenced:
            return None
        error = ForeignWriterError(self._newer_message(latest))
        with self._lock:
            if self.superseded is None:
                self.superseded = error
                log.error("%s; this log acknowledges no more writes", error)
        return self.superseded

    def _newer_message(self, latest: Manifest) -> str:
        return (
            f"{self._label}: another writer ({latest.writer or '?'}) committed leader epoch "
            f"{latest.leader_epoch} (manifest version {latest.version}) above this writer's "
            f"{self.epoch}"
        )
