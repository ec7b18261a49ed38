"""Tail rounds: the objects a broker on object storage writes, one per flush round.

A round holds, for every partition the broker leads that received records since the last
round, the bytes appended to that partition's active segment file since then: a *chunk*.
An active segment file (``sparklog.storage.active``) is a file header followed by
CRC-framed Arrow record batches, so a chunk is a run of whole frames, and a segment file
is rebuilt by writing the file header and then its chunks in order
(``sparklog.storage.tail.rebuild``).

Object: ``<root>/wal/<writer>/<seq>.wal`` (``names.wal_dir``, ``names.wal_object``;
writer ``n<node id>`` in a cluster, ``embedded`` otherwise). Format, little-endian::

    magic b"SPLGWAL1" | directory length u32 | crc32c(directory) u32
    | directory: UTF-8 JSON | chunk bytes, one after another

    directory = {"format": 1, "writer": "n1", "seq": 17, "created_ms": ...,
                 "chunks": [{"topic": "t", "partition": 0, "epoch": 4, "claim": "9f2c...",
                             "segment": "00000000000000001000-e00000000004.arrow",
                             "start": 16, "end": 4112, "base": 1000, "next": 1090,
                             "at": 230}, ...]}

``start``/``end``: the chunk's byte range in the segment file; ``base``/``next``: the
offsets of its first record and the one after its last; ``at``: where its bytes start,
counted from the end of the directory (``TailEntry.at`` is absolute in the object). Each
frame carries its own CRC-32C, checked when the file is rebuilt; the directory has its own.

An object is written once, whole, with create-if-absent, and never changed. It is
*committed* when its chunks are recorded where the broker's committer keeps the tail
(etcd in a cluster, ``sparklog.cluster.tail``; the object's existence for an embedded
broker, ``sparklog.storage.tail.embedded``). Objects nobody committed, and objects whose
every chunk was sealed into Parquet, are deleted by ``collect_rounds``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import crc32c

from sparklog.errors import CorruptSegmentError

MAGIC = b"SPLGWAL1"
FORMAT = 1
_HEAD = struct.Struct("<8sII")
HEAD_SIZE = _HEAD.size
#: bytes read first when only the directory is wanted (more if it is longer)
DIRECTORY_PROBE = 64 * 1024


@dataclass(frozen=True)
class TailEntry:
    """One committed chunk: where a run of a partition's segment bytes is kept."""

    topic: str
    partition: int
    epoch: int
    segment: str
    start: int
    end: int
    base: int
    next: int
    #: the object, relative to the storage root (``wal/n1/<seq>.wal``)
    object: str
    at: int
    #: the claim of the partition's tail this chunk was cut under (a cluster broker's
    #: ``EtcdTail.claim`` token; "" for an embedded broker)
    claim: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TailEntry:
        return cls(**json.loads(data))


@dataclass(frozen=True)
class Claimed:
    """A partition's committed chunks, and the token of the claim that read them: chunks
    are committed, and dropped, only under it ("" for an embedded broker)."""

    entries: list[TailEntry]
    token: str = ""


@dataclass(frozen=True)
class Chunk:
    """A chunk being written: its entry (``at`` filled in by ``encode``) and bytes."""

    entry: TailEntry
    data: bytes


def encode(
    writer: str, seq: int, created_ms: int, chunks: list[Chunk]
) -> tuple[bytes, list[TailEntry]]:
    """The object's bytes and the entries of its chunks, ``at`` set."""
    entries: list[TailEntry] = []
    at = 0
    for c in chunks:
        entries.append(_with(c.entry, at=at))
        at += len(c.data)
    # the directory records "at" relative to where the chunk bytes start (its own length
    # is not known before it is written); a reader adds that start
    rel = [{k: v for k, v in asdict(e).items() if k != "object"} for e in entries]
    directory = json.dumps(
        {"format": FORMAT, "writer": writer, "seq": seq, "created_ms": created_ms, "chunks": rel},
        separators=(",", ":"),
    ).encode()
    head = _HEAD.pack(MAGIC, len(directory), crc32c.crc32c(directory))
    data_start = HEAD_SIZE + len(directory)
    return head + directory + b"".join(c.data for c in chunks), [
        _with(e, at=e.at + data_start) for e in entries
    ]


def _with(e: TailEntry, *, at: int) -> TailEntry:
    d = asdict(e)
    d["at"] = at
    return TailEntry(**d)


def directory_length(head: bytes, where: str) -> int:
    """The length of the directory that follows the first ``HEAD_SIZE`` bytes."""
    if len(head) < HEAD_SIZE:
        raise CorruptSegmentError(f"{where}: a tail round shorter than its header")
    magic, length, _crc = _HEAD.unpack_from(head)
    if magic != MAGIC:
        raise CorruptSegmentError(f"{where}: not a tail round (magic {magic!r})")
    return int(length)


@dataclass(frozen=True)
class RoundDirectory:
    """What a round object's directory says."""

    seq: int
    writer: str
    entries: list[TailEntry]


def decode_directory(data: bytes, object_path: str, where: str) -> RoundDirectory:
    """The directory of an object whose first bytes are ``data`` (at least ``HEAD_SIZE``
    + the directory); entries' ``at`` made absolute in the object."""
    length = directory_length(data, where)
    _magic, _length, crc = _HEAD.unpack_from(data)
    directory = data[HEAD_SIZE : HEAD_SIZE + length]
    if len(directory) < length or crc32c.crc32c(directory) != crc:
        raise CorruptSegmentError(f"{where}: the tail round's directory is torn or corrupt")
    d = json.loads(directory)
    if d.get("format") != FORMAT:
        raise CorruptSegmentError(f"{where}: tail round format {d.get('format')} unknown")
    start = HEAD_SIZE + length
    out = []
    for c in d["chunks"]:
        c["at"] += start
        c["object"] = object_path
        out.append(TailEntry(**c))
    return RoundDirectory(int(d["seq"]), str(d["writer"]), out)


def chunk_ranges(entries: Iterable[TailEntry]) -> list[tuple[int, int]]:
    """The byte ranges of ``entries`` in their object."""
    return [(e.at, e.at + e.end - e.start) for e in entries]
