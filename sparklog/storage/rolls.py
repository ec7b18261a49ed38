"""Rolls a writer on object storage has made but not committed: carried by its next commit.

On a local root a roll commits a manifest version of its own (``PartitionLog``'s roll,
step 2). On object storage that PUT is folded into the seal: the roll is kept here, the
log's own manifest shows it at once (reads, the sealer and the next roll see the rolled
segment and the new active one), and the writer's next manifest commit, normally the seal
of the rolled segment, applies it first (``transforms.Rolled``). So a segment costs two
PUTs: its Parquet file and one manifest version that both rolls and seals it.

Commit sequence of a roll on object storage (A active, B new):
  1. every byte of A committed to the tail; B created in the cache; the roll kept here.
     B's first chunk in the tail says that A ended at B's base: the tail, not the
     manifest, is what makes the roll durable.
  2. the seal of A writes ``A.parquet``, then commits ``Rolled((A -> B,), Seal(A))``.
  3. the seal drops A's chunks from the tail (they were needed only until 2).
A crash between 1 and 2 leaves the manifest with A active and the tail holding chunks of
A and B. The next writer to open the partition (this broker again, or the one taking it
over) finds B past the active segment in the committed chunks, rebuilds both files from
them and commits the roll before it recovers (``recovery.open_partition``), then seals A
as any rolled segment. A crash between 2 and 3 is the seal's own case: chunks of a sealed
segment are dropped on open.

Who writes what: only the partition's writer (its leader, under its leader epoch) rolls
and commits rolls; jobs never touch the active segment, so a kept roll never conflicts
with their commits, and ``apply`` lays it over whatever version they committed.
"""

from __future__ import annotations

from sparklog.storage import transforms
from sparklog.storage.manifest import Manifest


class PendingRolls:
    """A writer's uncommitted rolls, oldest first. Not thread-safe: the log's lock guards
    it, as it guards the commits that carry the rolls."""

    def __init__(self) -> None:
        self._rolls: list[transforms.Roll] = []

    def __bool__(self) -> bool:
        return bool(self._rolls)

    def add(self, roll: transforms.Roll, manifest: Manifest) -> Manifest:
        """Keep ``roll``; returns ``manifest`` with it applied (the writer's own view)."""
        self._rolls.append(roll)
        return roll(manifest)

    def apply(self, manifest: Manifest) -> Manifest:
        """``manifest`` (a committed version) with the kept rolls laid over it."""
        if not self._rolls:
            return manifest
        out = transforms.Rolled(tuple(self._rolls))(manifest)
        return manifest if out is None else out

    def carried(self, transform: transforms.Transform) -> transforms.Transform:
        """``transform`` preceded by the kept rolls (itself when none are kept)."""
        if not self._rolls:
            return transform
        return transforms.Rolled(tuple(self._rolls), transform)

    def committed(self) -> None:
        """A commit that carried the kept rolls succeeded: they are in the manifest."""
        self._rolls.clear()
