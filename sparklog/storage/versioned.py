"""A directory of versions, ``<version>.json`` (``names.version_name``), each created once.

The commit protocol of every versioned structure sparklog keeps - partition manifests, topic
metadata, the Spark sink's per-task state: a writer creates version ``v + 1`` with
create-if-absent (``FileSystem.create_exclusive``), never overwrites or renames, so two
writers racing for the same version cannot both win, on local disks and object stores
alike. Reading the latest lists the directory and reads the highest version; if that one is
pruned meanwhile, the listing is retried. Versions are removed only by their owner's
cleanup (``delete``), oldest first.
"""

from __future__ import annotations

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem


class VersionedFiles:
    """A directory of ``<version>.json`` files committed by create-if-absent."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.directory = directory

    def versions(self) -> list[int]:
        out = [names.parse_version_name(n) for n in self.fs.listdir(self.directory)]
        return sorted(v for v in out if v is not None)

    def path(self, version: int) -> str:
        return self.fs.join(self.directory, names.version_name(version))

    def read(self, version: int) -> bytes:
        return self.fs.read_bytes(self.path(version))

    def latest(self) -> tuple[int, bytes] | None:
        """The newest version and its bytes (retrying if it is cleaned up meanwhile)."""
        for _ in range(10):
            versions = self.versions()
            if not versions:
                return None
            try:
                return versions[-1], self.read(versions[-1])
            except FileNotFoundError:
                continue
        raise CorruptMetadataError(f"{self.directory}: versions keep disappearing")

    def try_commit(self, version: int, data: bytes) -> bool:
        """Create ``version`` unless it exists; False if another writer created it first."""
        return self.fs.create_exclusive(self.path(version), data)

    def delete(self, version: int) -> None:
        self.fs.delete(self.path(version))
