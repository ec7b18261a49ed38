"""The filesystem seam: everything storage does to files goes through ``FileSystem``.

One module per backend (``local`` for POSIX disks with real fsync and atomic
create-if-absent, ``s3`` for ``s3://`` roots with atomic create-if-absent by conditional PUT,
``arrow`` for any other ``pyarrow.fs`` filesystem: GCS, HDFS, in-memory);
``sparklog.storage.store.filesystem_for`` picks one for a root. One contract test suite
(tests/storage/test_fs_contract.py) runs against every backend.

Paths are plain ``/``-separated strings; ``FileSystem.join`` builds them. Callers never
build paths by string concatenation (see ``sparklog.storage.names``).
"""

from __future__ import annotations

import abc
import posixpath
from typing import Protocol

import pyarrow as pa


class AppendFile(Protocol):
    """A file open for appending: the active segment and index files."""

    @property
    def size(self) -> int: ...

    def write(self, data: bytes | memoryview | pa.Buffer) -> int: ...

    def write_parts(self, parts: list[bytes | memoryview | pa.Buffer]) -> int:
        """Append ``parts`` one after another (one system call where the file allows)."""
        ...

    def sync(self) -> None: ...

    def truncate(self, size: int) -> None: ...

    def close(self) -> None: ...


class FileSystem(abc.ABC):
    """What storage needs from a filesystem; see the module docstring."""

    #: True when ``open_append`` keeps a file open for appends (needed by a broker's
    #: active segments). Object stores have no append; they hold sealed segments only.
    supports_append: bool = True
    #: True when the storage itself keeps several copies of every file, each surviving the
    #: loss of one machine or disk (object stores, HDFS). Kafka's replication factor is
    #: then the storage's to give; a local disk is one copy (``sparklog.broker.replicas``).
    redundant: bool = False
    #: True when ``create_exclusive`` is atomic across processes and machines (a local
    #: disk's O_EXCL, an object store's conditional PUT); cluster mode requires it
    atomic_create: bool = True

    def join(self, *parts: str) -> str:
        return posixpath.join(*parts)

    def local_path(self, path: str) -> str | None:
        """The path of ``path`` on this machine's disk if the backend stores it there (so
        OS locks apply to it), else None."""
        return None

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """True if a file or directory exists at ``path``."""

    @abc.abstractmethod
    def is_dir(self, path: str) -> bool:
        """True if ``path`` is a directory."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Size of the file at ``path`` in bytes; FileNotFoundError if absent."""

    @abc.abstractmethod
    def mtime_ms(self, path: str) -> int:
        """Last modification time of ``path`` in epoch milliseconds."""

    @abc.abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of directory ``path``; [] if it does not exist."""

    @abc.abstractmethod
    def makedirs(self, path: str) -> None:
        """Create ``path`` and its parents; durable (parent directories synced) on local disks."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Delete the file at ``path``; a missing file is not an error."""

    @abc.abstractmethod
    def delete_tree(self, path: str) -> None:
        """Delete the directory ``path`` and everything below it; missing is not an error."""

    @abc.abstractmethod
    def read_buffer(self, path: str) -> pa.Buffer:
        """The whole file as an Arrow buffer (memory-mapped where the backend can)."""

    @abc.abstractmethod
    def open_input(self, path: str) -> pa.NativeFile:
        """A random-access input file (what Parquet readers want)."""

    @abc.abstractmethod
    def open_output(self, path: str) -> pa.NativeFile:
        """A new file for writing from the start; call ``sync_file`` after closing it."""

    @abc.abstractmethod
    def sync_file(self, path: str) -> None:
        """Make the content of a closed file durable (no-op where close is durable)."""

    @abc.abstractmethod
    def sync_dir(self, path: str) -> None:
        """Make the entries of directory ``path`` durable (no-op where not applicable)."""

    @abc.abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that readers see the old or the new content.

        Used for checkpoints, which are derived or monotone: their durability is not
        required, only that no reader ever sees a torn file.
        """

    def overwrite_small(self, path: str, data: bytes) -> None:
        """Overwrite a small fixed-size file in place, creating it if absent.

        Cheaper than ``write_atomic`` but a concurrent reader may see a torn mix of old and
        new bytes, so ``data`` must carry its own checksum. Not durable. The default is
        ``write_atomic``.
        """
        self.write_atomic(path, data)

    @abc.abstractmethod
    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` durably if it does not exist.

        Returns False, changing nothing, if ``path`` exists. Readers never see a partial
        file. This is the only commit primitive of the manifest protocol.
        """

    @abc.abstractmethod
    def open_append(self, path: str) -> AppendFile:
        """Open ``path`` for appending, creating it if absent."""

    def read_bytes(self, path: str) -> bytes:
        return bytes(self.read_buffer(path).to_pybytes())

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(start, end)`` range of the file (an object store reads
        them with ranged GETs of that object alone)."""
        buf = self.read_buffer(path)
        return [buf[start:end].to_pybytes() for start, end in ranges]

    def write_new(self, path: str, data: bytes) -> None:
        """Write a whole new file durably (content synced; the directory is synced by callers)."""
        with self.open_output(path) as out:
            out.write(data)
        self.sync_file(path)
