"""Backend over any ``pyarrow.fs.FileSystem`` (S3, GCS, HDFS, Azure, in-memory).

Durability is the store's: a closed output stream is durable, so the sync methods are
no-ops. ``write_atomic`` relies on whole-object PUT being atomic (true of object stores).

``create_exclusive`` is check-then-write here because pyarrow exposes no conditional PUT:
it is exclusive only while one process writes a partition's manifest at a time (see the
lease seam, ``sparklog.storage.lease``, and docs/ARCHITECTURE.md).
``open_append`` works where the store supports appends (HDFS, local, in-memory); object
stores hold sealed segments only.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.fs as pafs

from sparklog.storage.fs import FileSystem

# create_exclusive is check-then-write; this makes it atomic at least between the threads
# of one process (pyarrow offers no conditional create to do better across processes).
_CREATE_LOCK = threading.Lock()
#: ``pyarrow.fs`` filesystems that keep several copies of every file (object stores,
#: HDFS's block replicas); local disk and in-memory ones keep one
_REDUNDANT = frozenset({"s3", "gcs", "abfs", "hdfs"})


class ArrowAppendFile:
    """Appends through ``open_append_stream``; ``sync`` flushes the stream."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self._fs = fs
        self._path = path
        info = fs.get_file_info(path)
        self._size = info.size if info.type == pafs.FileType.File else 0
        self._out = fs.open_append_stream(path)

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes | memoryview | pa.Buffer) -> int:
        n = int(self._out.write(data))
        self._size += n
        return n

    def write_parts(self, parts: list[bytes | memoryview | pa.Buffer]) -> int:
        return sum(self.write(part) for part in parts)

    def sync(self) -> None:
        # A flushed stream is not published on every store (the in-memory one, object-like
        # stores) until it is closed: close it and reopen for the next appends.
        self._out.close()
        self._out = self._fs.open_append_stream(self._path)

    def truncate(self, size: int) -> None:
        self._out.close()
        with self._fs.open_input_file(self._path) as f:
            head = f.read(size)
        with self._fs.open_output_stream(self._path) as out:
            out.write(head)
        self._size = size
        self._out = self._fs.open_append_stream(self._path)

    def close(self) -> None:
        if not self._out.closed:
            self._out.close()


class ArrowFileSystem(FileSystem):
    """Wraps a ``pyarrow.fs.FileSystem``; paths are that filesystem's paths."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs
        self.supports_append = True
        self.redundant = fs.type_name in _REDUNDANT
        #: check-then-write across processes (see create_exclusive), unless on a local disk
        self.atomic_create = fs.type_name == "local"

    def local_path(self, path: str) -> str | None:
        return path if isinstance(self.fs, pafs.LocalFileSystem) else None

    def _info(self, path: str) -> pafs.FileInfo:
        return self.fs.get_file_info(path)

    def exists(self, path: str) -> bool:
        return bool(self._info(path).type != pafs.FileType.NotFound)

    def is_dir(self, path: str) -> bool:
        return bool(self._info(path).type == pafs.FileType.Directory)

    def size(self, path: str) -> int:
        info = self._info(path)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(path)
        return int(info.size)

    def mtime_ms(self, path: str) -> int:
        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        return int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0

    def listdir(self, path: str) -> list[str]:
        if self._info(path).type != pafs.FileType.Directory:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=False))
        return sorted(i.base_name for i in infos)

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def delete(self, path: str) -> None:
        if self._info(path).type == pafs.FileType.File:
            self.fs.delete_file(path)

    def delete_tree(self, path: str) -> None:
        if self._info(path).type == pafs.FileType.Directory:
            self.fs.delete_dir(path)

    def read_buffer(self, path: str) -> pa.Buffer:
        with self.fs.open_input_file(path) as f:
            return f.read_buffer()

    def open_input(self, path: str) -> pa.NativeFile:
        return self.fs.open_input_file(path)

    def open_output(self, path: str) -> pa.NativeFile:
        return self.fs.open_output_stream(path)

    def sync_file(self, path: str) -> None:
        return None

    def sync_dir(self, path: str) -> None:
        return None

    def write_atomic(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        with _CREATE_LOCK:
            if self.exists(path):
                return False
            with self.fs.open_output_stream(path) as out:
                out.write(data)
            return True

    def open_append(self, path: str) -> ArrowAppendFile:
        return ArrowAppendFile(self.fs, path)
