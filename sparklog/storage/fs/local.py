"""Local POSIX disk backend: real fsyncs, atomic create-if-absent by hard link.

``create_exclusive`` writes a uniquely named temporary file, fsyncs it, then ``link()``s it
to the final name: link fails with EEXIST instead of overwriting (``rename`` would silently
overwrite), and the final name only ever appears with its full content. The temporary name
is then unlinked and the directory fsynced. A crash leaves at most a ``.tmp-*`` file,
which the loader deletes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid

import pyarrow as pa

from sparklog.storage import names
from sparklog.storage.fs import FileSystem


class LocalAppendFile:
    """An ``O_APPEND`` file descriptor; ``sync`` is ``fdatasync``."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes | memoryview | pa.Buffer) -> int:
        view = memoryview(data)
        total = 0
        while total < len(view):
            total += os.write(self._fd, view[total:])
        self._size += total
        return total

    def write_parts(self, parts: list[bytes | memoryview | pa.Buffer]) -> int:
        """One ``writev`` for all parts (a frame's header, payload and padding); a short
        write, rare on a local file, is completed part by part."""
        views = [memoryview(p) for p in parts]
        want = sum(len(v) for v in views)
        done = os.writev(self._fd, views)
        self._size += done
        if done < want:
            for v in views:
                if done >= len(v):
                    done -= len(v)
                    continue
                self.write(v[done:])
                done = 0
        return want

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)
        self._size = size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class LocalFileSystem(FileSystem):
    """The local disk. Paths are absolute OS paths."""

    def local_path(self, path: str) -> str | None:
        return path

    supports_append = True

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def makedirs(self, path: str) -> None:
        missing = []
        p = os.path.abspath(path)
        while not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d)
            self.sync_dir(os.path.dirname(d))

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def read_buffer(self, path: str) -> pa.Buffer:
        if os.path.getsize(path) == 0:
            return pa.py_buffer(b"")
        with pa.memory_map(path, "r") as f:
            return f.read_buffer()

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.memory_map(path, "r")

    def open_output(self, path: str) -> pa.NativeFile:
        return pa.OSFile(path, "wb")

    def sync_file(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_tmp(self, path: str, data: bytes, *, sync: bool) -> str:
        tmp = os.path.join(os.path.dirname(path), f"{names.TMP_PREFIX}{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = self._write_tmp(path, data, sync=False)
        os.replace(tmp, path)

    def overwrite_small(self, path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        tmp = self._write_tmp(path, data, sync=True)
        try:
            os.link(tmp, path)
        except OSError as e:
            if e.errno == errno.EEXIST:
                return False
            raise
        finally:
            os.unlink(tmp)
        self.sync_dir(os.path.dirname(path))
        return True

    def open_append(self, path: str) -> LocalAppendFile:
        return LocalAppendFile(path)
