"""A directory of versions, ``<version>.json`` (``names.version_name``), each created once.

The commit protocol of every versioned structure sparklog keeps - partition manifests, topic
metadata, the Spark sink's per-task state: a writer creates version ``v + 1`` with
create-if-absent (``FileSystem.create_exclusive``), never overwrites or renames, so two
writers racing for the same version cannot both win, on local disks and object stores
alike. A new directory starts at version 0, the versions kept are contiguous, and they are
removed only by their owner's cleanup (``delete``), oldest first.

Reading the latest (``latest``) returns a version that existed while the call ran and had
no successor when it was looked for; if that version is pruned meanwhile, the read is
retried. How it is found depends on the filesystem:

- On a filesystem with appends (a local disk) the directory is listed and its highest
  version read, every time: a listing is one cheap system call.
- On an object store (``on_object_store``: a backend that cannot append, or a broker's
  tiered filesystem over one) a LIST is the dearest request, and the
  hot paths (a stream's micro-batch planning, a follower's fetch) read the same directories
  again and again. So the newest version seen is remembered, in this process, per directory
  (``remember`` adds what another process saw: the version a Spark task's driver planned
  on), and the next ``latest`` reads forward from it: ``v + 1``, ``v + 2``, ... until a GET
  answers 404; the last version found is the newest (and already read). In the steady state
  (nothing new) that is two GETs: ``v + 1`` missing, then ``v`` read again (a directory
  deleted and made anew may hold another ``v``). A directory seen empty is remembered too,
  for ``EMPTY_RECHECK_S``: its probe is one GET of version 0. (A missing version 0 cannot
  tell "still empty" from "its first versions were pruned since", which takes more than
  ``gc.KEEP_VERSIONS`` commits and their delete delay; so a directory that stays empty is
  listed again once per ``EMPTY_RECHECK_S``.) The directory is listed only when nothing is
  known of it, when the remembered version is gone too (pruned, or its directory deleted
  and made anew), or after ``MAX_PROBES`` versions found in one probe (a reader far behind:
  one listing beats many GETs). Because versions are contiguous, "``v`` exists and
  ``v + 1`` does not" means ``v`` is the newest, so a remembered version is only where the
  search starts: a stale or foreign one costs requests, never a wrong answer.
"""

from __future__ import annotations

import threading
import time

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem
from sparklog.storage.fs.tiered import TieredFileSystem


def on_object_store(fs: FileSystem) -> bool:
    """Whether the files storage writes whole (versions, sealed segments) are objects in
    an object store on ``fs``: a backend that cannot append (``supports_append`` false), or
    a broker's tiered filesystem, which keeps only its cache files on a disk."""
    target = fs.remote if isinstance(fs, TieredFileSystem) else fs
    return not target.supports_append


#: versions found one after another in one probe before the directory is listed instead
MAX_PROBES = 8
#: how long a directory seen empty is probed (version 0) before it is listed again
EMPTY_RECHECK_S = 60.0
_EMPTY = -1  # remembered for a directory seen without versions: the probe reads version 0


class _List:
    """What ``VersionedFiles._probe`` returns when the directory must be listed."""


_LIST = _List()

# directory -> (the newest version seen, or _EMPTY; when it was seen, time.monotonic())
_newest: dict[str, tuple[int, float]] = {}
_newest_lock = threading.Lock()


def _known(directory: str) -> int | None:
    """The newest version of ``directory`` seen in this process (``_EMPTY``: none while
    ``EMPTY_RECHECK_S`` has not passed since it was seen empty); None if nothing is known."""
    with _newest_lock:
        found = _newest.get(directory)
    if found is None:
        return None
    version, seen = found
    if version == _EMPTY and time.monotonic() - seen >= EMPTY_RECHECK_S:
        return None
    return version


def _note(directory: str, version: int) -> None:
    with _newest_lock:
        _newest[directory] = (version, time.monotonic())


class VersionedFiles:
    """A directory of ``<version>.json`` files committed by create-if-absent; see the
    module docstring for how ``latest`` finds the newest."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.directory = directory
        #: probe forward from a remembered version instead of listing (object stores)
        self.probing = on_object_store(fs)

    def versions(self) -> list[int]:
        out = [names.parse_version_name(n) for n in self.fs.listdir(self.directory)]
        return sorted(v for v in out if v is not None)

    def path(self, version: int) -> str:
        return self.fs.join(self.directory, names.version_name(version))

    def read(self, version: int) -> bytes:
        return self.fs.read_bytes(self.path(version))

    def exists(self, version: int) -> bool:
        """Whether ``version`` exists: one HEAD on an object store (where ``exists`` of a
        missing key also lists, to find a directory there)."""
        if not self.probing:
            return self.fs.exists(self.path(version))
        try:
            self.fs.size(self.path(version))
        except FileNotFoundError:
            return False
        return True

    def remember(self, version: int) -> None:
        """Note that ``version`` exists (another process saw it): where the next probe of
        this directory starts, unless a newer one is known here already."""
        known = _known(self.directory)
        if self.probing and (known is None or version > known):
            _note(self.directory, version)

    def latest(self) -> tuple[int, bytes] | None:
        """The newest version and its bytes (retrying if it is cleaned up meanwhile)."""
        if self.probing:
            probed = self._probe()
            if not isinstance(probed, _List):
                return probed
        for _ in range(10):
            versions = self.versions()
            if not versions:
                if self.probing:
                    _note(self.directory, _EMPTY)
                return None
            try:
                found = versions[-1], self.read(versions[-1])
            except FileNotFoundError:
                continue
            if self.probing:
                _note(self.directory, found[0])
            return found
        raise CorruptMetadataError(f"{self.directory}: versions keep disappearing")

    def _probe(self) -> tuple[int, bytes] | _List | None:
        """The newest version found by reading forward from the remembered one (None: the
        directory is still empty); ``_LIST`` when it must be listed instead (see the
        module docstring)."""
        known = _known(self.directory)
        if known is None:
            return _LIST
        newest: tuple[int, bytes] | None = None
        for step in range(1, MAX_PROBES + 1):
            try:
                newest = known + step, self.read(known + step)
            except FileNotFoundError:
                break
        else:
            return _LIST  # far behind: a listing finds the newest in one request
        if newest is None:  # nothing after the remembered version: read it again
            if known == _EMPTY:
                return None
            try:
                newest = known, self.read(known)
            except FileNotFoundError:
                return _LIST  # pruned, or the directory was made anew: list it
        _note(self.directory, newest[0])
        return newest

    def try_commit(self, version: int, data: bytes) -> bool:
        """Create ``version`` unless it exists; False if another writer created it first."""
        won = self.fs.create_exclusive(self.path(version), data)
        if won:
            self.remember(version)
        return won

    def delete(self, version: int) -> None:
        self.fs.delete(self.path(version))
