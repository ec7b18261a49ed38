"""Process locks on local disks: the embedded-mode writer lock and the compaction job lock.

``<root>/.lock`` (``DataDirLock``) is held with ``flock(LOCK_EX | LOCK_NB)`` for the life of
the writer; the kernel releases it when the process dies, so a SIGKILLed broker never leaves
a stale lock. ``<root>/topics/<topic>/.compaction.lock`` (``CompactionLock``) is held the
same way by a compaction job, so two jobs never rewrite one topic at once (they would pick
the same new segment names). The file's content (pid and start time) is informational only.
"""

from __future__ import annotations

import fcntl
import os
import time

from sparklog.errors import CompactionRunningError, DataDirLockedError, SparkLogError
from sparklog.storage import names


class DataDirLock:
    """An exclusive lock on a local storage root; see the module docstring."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, names.LOCK_FILE)
        self._fd: int | None = None

    def _locked_error(self, holder: str) -> SparkLogError:
        return DataDirLockedError(
            f"{os.path.dirname(self.path)} is locked by another process ({holder or '?'})"
        )

    def acquire(self) -> DataDirLock:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            try:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise self._locked_error(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} since={int(time.time())}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class CompactionLock(DataDirLock):
    """The lock a compaction job holds on one local topic; see the module docstring."""

    def __init__(self, root: str, topic: str) -> None:
        super().__init__(root)
        self.path = names.compaction_lock_path(root, topic)
        self.topic = topic

    def _locked_error(self, holder: str) -> SparkLogError:
        return CompactionRunningError(
            f"topic {self.topic}: another compaction job holds {self.path} ({holder or '?'})"
        )
