"""The tail of an embedded broker on object storage: the rounds themselves are the commit.

With no etcd, an embedded broker (one per storage root) commits a round by creating its
object: ``<root>/wal/embedded/<seq>.wal`` with create-if-absent, ``seq`` the next number
after the last round (``names.wal_object``: dense, starting at 0). Rounds are uploaded one
at a time, in order (``ordered``), and a failed upload is retried under the same number,
so the numbers are written without holes (``drop`` later deletes rounds whose chunks were
all sealed).

Who writes what: only the root's embedded broker writes ``wal/embedded/``. Two of them on
one root (a misconfiguration the owner record and the local lease do not catch across
machines) cannot interleave unnoticed: each round is the next number, and the second
writer's create of a number the other made fails. A failed create whose object holds this
process's incarnation (a retry after a lost answer) is this broker's own round: its chunks
are committed, and the next round, cut again from the committed position, overlaps them
(a rebuild takes each byte once); one holding another incarnation is
another writer, and the broker stops acknowledging (``ForeignWriterError``).

The index of committed chunks is rebuilt at start: one LIST of ``wal/embedded/`` and one
ranged GET per object (its directory, ``objects.decode_directory``). A partition's chunks
are dropped once sealed (``drop``); an object whose chunks are all dropped is deleted.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import defaultdict

from sparklog.errors import ForeignWriterError, SparkLogError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem
from sparklog.storage.tail.objects import (
    DIRECTORY_PROBE,
    HEAD_SIZE,
    Claimed,
    RoundDirectory,
    TailEntry,
    decode_directory,
    directory_length,
)

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


class EmbeddedTail:
    """The committer and index of an embedded broker's rounds (module docstring)."""

    ordered = True

    def __init__(self, fs: FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root
        self.directory = names.wal_dir(root, names.EMBEDDED_WRITER)
        #: what this process writes in its rounds' directories (``writer``)
        self.writer = f"{names.EMBEDDED_WRITER}/{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._index: dict[TopicPartition, list[TailEntry]] = defaultdict(list)
        self._objects: dict[str, set[TopicPartition]] = {}
        seqs = sorted(
            s
            for s in (names.parse_wal_object(n) for n in fs.listdir(self.directory))
            if s is not None
        )
        for seq in seqs:
            rel = self.object_path(seq)
            self._add(rel, read_directory(fs, fs.join(root, rel), rel).entries)
        self._seq = seqs[-1] + 1 if seqs else 0

    def object_path(self, seq: int) -> str:
        return f"{names.WAL_DIR}/{names.EMBEDDED_WRITER}/{names.wal_object(seq)}"

    def next_seq(self) -> int:
        return self._seq

    def _add(self, rel: str, entries: list[TailEntry]) -> None:
        with self._lock:
            keys = self._objects.setdefault(rel, set())
            for e in entries:
                self._index[(e.topic, e.partition)].append(e)
                keys.add((e.topic, e.partition))

    def upload(self, seq: int, data: bytes) -> str:
        rel = self.object_path(seq)
        path = self.fs.join(self.root, rel)
        if self.fs.create_exclusive(path, data):
            return rel
        # the number exists: our own earlier attempt (its answer lost), or another writer
        found = read_directory(self.fs, path, rel)
        if found.writer == self.writer:
            self._add(rel, found.entries)
            self._seq = seq + 1
            raise SparkLogError(f"{path}: an earlier attempt of this round landed; cut again")
        raise ForeignWriterError(
            f"{path}: another embedded broker writes this storage root's tail (tail round "
            f"{seq} exists); this broker acknowledges no more writes"
        )

    def commit(self, seq: int, entries: list[TailEntry]) -> dict[TopicPartition, SparkLogError]:
        self._add(self.object_path(seq), entries)
        self._seq = seq + 1
        return {}

    def claim(self, topic: str, partition: int, epoch: int) -> Claimed:
        with self._lock:
            return Claimed(list(self._index.get((topic, partition), [])))

    def drop(self, topic: str, partition: int, epoch: int, claim: str, through: int) -> bool:
        """Forget the chunks of ``topic-partition`` below offset ``through`` (sealed);
        delete objects left with none."""
        key = (topic, partition)
        gone: list[str] = []
        with self._lock:
            kept = [e for e in self._index.get(key, []) if e.next > through]
            dropped = {e.object for e in self._index.get(key, [])} - {e.object for e in kept}
            self._index[key] = kept
            for rel in dropped:
                keys = self._objects.get(rel)
                if keys is None:
                    continue
                keys.discard(key)
                if not keys:
                    del self._objects[rel]
                    gone.append(rel)
        for rel in gone:
            self.fs.delete(self.fs.join(self.root, rel))
        return True

    def topic_keys(self) -> set[str]:
        with self._lock:
            return {topic for (topic, _p), entries in self._index.items() if entries}

    def forget(self, topic: str) -> None:
        """Drop every chunk of the tail key ``topic`` (objects left with none deleted)."""
        with self._lock:
            partitions = [p for (t, p) in self._index if t == topic]
        for p in partitions:
            self.drop(topic, p, -1, "", 2**63 - 1)


def _full_head(fs: FileSystem, path: str, head: bytes) -> bytes:
    need = HEAD_SIZE + directory_length(head, path)
    if len(head) >= need:
        return head
    return fs.read_ranges(path, [(0, need)])[0]


def read_directory(fs: FileSystem, path: str, rel: str) -> RoundDirectory:
    """A round object's directory (one ranged GET, two if it is long)."""
    head = fs.read_ranges(path, [(0, DIRECTORY_PROBE)])[0]
    return decode_directory(_full_head(fs, path, head), rel, path)
