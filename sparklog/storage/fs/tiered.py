"""A broker's view of a root on object storage: the bucket, with its cache files local.

A broker whose storage root is on an object store (``supports_append`` false) cannot keep
its active segments there: objects do not grow. ``TieredFileSystem`` presents one
filesystem to ``PartitionLog`` in which the files ``names.is_cache_file`` names - active
and rolled ``.arrow`` segments, their indexes, the high-watermark and recovery-point
checkpoints - live under a local cache directory, and every other file (manifests, sealed
Parquet segments, producer snapshots, transaction indexes, topic metadata) in the bucket.

Layout: ``<remote root>/<relative path>`` of a cache file is
``<cache dir>/<relative path>`` on the local disk. Nothing else is ever written locally.

The cache holds no truth of its own: the committed tail in the object store
(``sparklog.storage.tail``) is what makes a cache file's bytes durable, and a broker that
lost its cache rebuilds the files from there before it opens a partition
(``sparklog.storage.tail.rebuild``). Directory listings merge both sides; a directory
exists if it exists on either.

Thread-safety: as the two backends it wraps.
"""

from __future__ import annotations

import os
import posixpath

import pyarrow as pa

from sparklog.storage import names
from sparklog.storage.fs import AppendFile, FileSystem
from sparklog.storage.fs.local import LocalFileSystem


class TieredFileSystem(FileSystem):
    """``remote`` (the object store holding ``remote_root``) with cache files kept under
    the local directory ``cache_dir`` (module docstring)."""

    supports_append = True

    def __init__(self, remote: FileSystem, remote_root: str, cache_dir: str) -> None:
        self.remote = remote
        self.remote_root = remote_root.rstrip("/")
        self.cache_dir = os.path.abspath(cache_dir)
        self.local = LocalFileSystem()
        self.redundant = remote.redundant
        self.local.makedirs(self.cache_dir)

    def _cached(self, path: str) -> str | None:
        """The local path of ``path`` if it is a cache file, else None."""
        if not names.is_cache_file(posixpath.basename(path)):
            return None
        return self._local_of(path)

    def _local_of(self, path: str) -> str:
        rel = posixpath.relpath(path, self.remote_root)
        if rel.startswith(".."):
            raise ValueError(f"{path}: not under the storage root {self.remote_root}")
        return os.path.join(self.cache_dir, rel) if rel != "." else self.cache_dir

    def _pick(self, path: str) -> tuple[FileSystem, str]:
        local = self._cached(path)
        return (self.local, local) if local is not None else (self.remote, path)

    def exists(self, path: str) -> bool:
        fs, p = self._pick(path)
        return fs.exists(p)

    def is_dir(self, path: str) -> bool:
        return self.remote.is_dir(path) or self.local.is_dir(self._local_of(path))

    def size(self, path: str) -> int:
        fs, p = self._pick(path)
        return fs.size(p)

    def mtime_ms(self, path: str) -> int:
        fs, p = self._pick(path)
        return fs.mtime_ms(p)

    def listdir(self, path: str) -> list[str]:
        local = [n for n in self.local.listdir(self._local_of(path)) if names.is_cache_file(n)]
        return sorted(set(self.remote.listdir(path)) | set(local))

    def makedirs(self, path: str) -> None:
        self.remote.makedirs(path)
        self.local.makedirs(self._local_of(path))

    def delete(self, path: str) -> None:
        fs, p = self._pick(path)
        fs.delete(p)

    def delete_tree(self, path: str) -> None:
        self.remote.delete_tree(path)
        self.local.delete_tree(self._local_of(path))

    def read_buffer(self, path: str) -> pa.Buffer:
        fs, p = self._pick(path)
        return fs.read_buffer(p)

    def open_input(self, path: str) -> pa.NativeFile:
        fs, p = self._pick(path)
        return fs.open_input(p)

    def open_output(self, path: str) -> pa.NativeFile:
        fs, p = self._pick(path)
        return fs.open_output(p)

    def sync_file(self, path: str) -> None:
        fs, p = self._pick(path)
        fs.sync_file(p)

    def sync_dir(self, path: str) -> None:
        self.local.sync_dir(self._local_of(path))

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        fs, p = self._pick(path)
        return fs.read_ranges(p, ranges)

    def write_atomic(self, path: str, data: bytes) -> None:
        fs, p = self._pick(path)
        fs.write_atomic(p, data)

    def overwrite_small(self, path: str, data: bytes) -> None:
        fs, p = self._pick(path)
        fs.overwrite_small(p, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        fs, p = self._pick(path)
        return fs.create_exclusive(p, data)

    def open_append(self, path: str) -> AppendFile:
        local = self._cached(path)
        if local is None:
            return self.remote.open_append(path)  # refused by an object store, as it should
        self.local.makedirs(os.path.dirname(local))
        return self.local.open_append(local)
