"""Local lease backend: one ``flock`` file per lease name, on this machine's disk.

Lease files (``names.lease_path``): ``DATA_DIR`` is ``<dir>/.lock``, ``compaction/<topic>``
is ``<dir>/topics/<topic>/.compaction.lock``, any other name ``<dir>/.leases/<name>.lock``
(``/`` in a name becomes a subdirectory). A lease is held with ``flock(LOCK_EX | LOCK_NB)``
on the file for as long as the holder keeps it open; the kernel releases it when the holder
dies, so a SIGKILLed holder never leaves a stale lease, and a live holder never loses it:
``renew`` only checks that it was not released.

File content, rewritten (and fsynced) by each new holder while it holds the lock, so the
epoch only ever grows::

    epoch=7 holder=broker 0 pid=1234 host=web-3 since=1763980000

A file from before epochs existed (``pid=... since=...``) counts as epoch 0; one from
before hosts were recorded has no ``host=``. ``describe_holder`` turns a line into what an
error shows a person ("broker 0, pid 1234 on host web-3, since 2025-11-24 10:26:40 UTC").
Thread-safety: a ``LocalLease`` may be used from any thread; ``flock`` excludes other open
files of the same path, in this process too.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
import time

from sparklog.errors import LeaseLostError
from sparklog.storage import names
from sparklog.storage.lease import DATA_DIR, Lease, LeaseStore, held_error

_EPOCH = re.compile(r"\bepoch=(\d+)")
_HOLDER = re.compile(
    r"(?:\bholder=(?P<holder>.*?) )?\bpid=(?P<pid>\d+)(?: host=(?P<host>\S+))?"
    r" since=(?P<since>\d+)"
)


def describe_holder(content: str) -> str:
    """A lease file's line (module docstring) as a person reads it; the line itself if it
    does not parse."""
    m = _HOLDER.search(content)
    if m is None:
        return content or "holder unknown"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(m["since"])))
    where = f" on host {m['host']}" if m["host"] else ""
    who = f"{m['holder']}, " if m["holder"] else ""
    return f"{who}pid {m['pid']}{where}, since {since}"


class LocalLease(Lease):
    """A held ``flock`` (see the module docstring)."""

    def __init__(self, name: str, holder: str, epoch: int, path: str, fd: int) -> None:
        self.name = name
        self.holder = holder
        self.epoch = epoch
        self.path = path
        self._fd: int | None = fd
        self._lock = threading.Lock()

    def renew(self) -> None:
        if self._fd is None:
            raise LeaseLostError(f"lease {self.name!r} (epoch {self.epoch}) was released")

    @property
    def lost(self) -> bool:
        return self._fd is None

    def release(self) -> None:
        with self._lock:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None


class LocalLeaseStore(LeaseStore):
    """Leases as lock files under the directory ``directory`` (see the module docstring)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def path(self, name: str) -> str:
        return names.lease_path(self.directory, name)

    def acquire(self, name: str, holder: str) -> LocalLease:
        path = self.path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                content = os.pread(fd, 300, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            where = self.directory if name == DATA_DIR else path
            raise held_error(name, describe_holder(content), where) from None
        try:
            previous = os.pread(fd, 300, 0).decode(errors="replace")
            found = _EPOCH.search(previous)
            epoch = int(found.group(1)) + 1 if found else 1
            line = (
                f"epoch={epoch} holder={holder} pid={os.getpid()} host={os.uname().nodename} "
                f"since={int(time.time())}\n"
            )
            os.ftruncate(fd, 0)
            os.pwrite(fd, line.encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return LocalLease(name, holder, epoch, path, fd)
