"""The produced bytes of recent batches, served to fetches as they came (Kafka serves its
log's bytes; sparklog stores Arrow, and without this re-encodes every fetched batch).

What it holds. For each open partition (a ``PartitionHandle``: a take-over or a reopen
makes a new handle, so nothing cached by an earlier leader of the same offsets is ever
served), the Kafka record batches its produce requests appended, in offset order: each as
the producer sent it - its records, headers and compression untouched - with two header
fields rewritten, outside the batch CRC as in Kafka: ``baseOffset`` (the offset the log
gave its first record) and ``partitionLeaderEpoch`` (-1, as the Arrow path's encoder
writes). Byte for byte what ``encode_batches`` builds from the stored Arrow records with
the producer's codec, except the compressed record bytes (the producer's, not cramjam's)
and anything the producer wrote that the decoder does not keep (a record's own offset
delta: Kafka serves those as produced too, for uncompressed batches).

What it never holds (``AppendService`` decides, per batch, from the config of the log that
appended it): batches whose stored records differ from the wire ones - of a topic with
``message.timestamp.type=LogAppendTime`` (the log stamps the time) or a ``compression.type``
other than ``producer`` or the batch's own codec (Kafka recompresses those), a batch with
the LogAppendTime bit or producer fields without a producer id (the log stores CreateTime
and -1s) - and batches of a compacted topic (compaction rewrites what a fetch of an old
offset sees; a fetch of a compacted topic reads storage, even from batches cached before
the topic became compacted), and a batch whose ``lastOffsetDelta`` is not its record
count minus one. The record offset deltas inside a batch are not checked against their
positions (the decoder stores dense offsets): a producer that wrote others would see its
own deltas from the cache and dense ones from storage; no Kafka client writes such batches.
Transaction markers are written by the log, not produced: fetches read them, and any batch
the cache misses, from the stored Arrow records (``sparklog.broker.handlers.fetch``).

Bounds. One budget of ``fetch_cache_bytes`` for the whole broker (0 turns the cache off:
no copy on produce, no lookup on fetch); the oldest batch of all goes first, so what is
kept is the most recent writes of every partition, which is what consumers at the tail
fetch. A handle given up (a partition moved away, a topic deleted) frees its batches with
it; they count against the budget until their turn to be evicted comes. A fetch below
what is kept, or across a gap (a marker, a batch not cached), reads the stored records for
that range and goes on from the cache after it.

Threads: the event loop only (produce and fetch handlers).
"""

from __future__ import annotations

import bisect
import struct
import weakref
from collections import deque
from dataclasses import dataclass, field

_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH_AT = 12
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_NO_EPOCH = b"\xff\xff\xff\xff"


@dataclass(slots=True, weakref_slot=True)
class CachedBatches:
    """One partition's cached batches, oldest first: ``bases[i]``..``lasts[i]`` are the
    offsets of ``blobs[i]``; entries before ``head`` are evicted (the lists are compacted
    once that prefix is long)."""

    bases: list[int] = field(default_factory=list)
    lasts: list[int] = field(default_factory=list)
    blobs: list[bytes] = field(default_factory=list)
    head: int = 0

    def find(self, offset: int) -> int:
        """Index of the batch holding ``offset``, or -1."""
        i = bisect.bisect_right(self.bases, offset, self.head) - 1
        return i if i >= self.head and self.lasts[i] >= offset else -1

    def next_base(self, offset: int) -> int | None:
        """The first cached offset after ``offset`` (where a gap read may stop)."""
        i = bisect.bisect_right(self.bases, offset, self.head)
        return self.bases[i] if i < len(self.bases) else None

    def _evict_oldest(self) -> None:
        self.blobs[self.head] = b""
        self.head += 1
        if self.head >= 1024 and self.head * 2 >= len(self.bases):
            del self.bases[: self.head], self.lasts[: self.head], self.blobs[: self.head]
            self.head = 0


class WireCache:
    """See the module docstring. ``put`` after an append, ``take`` in a fetch."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        #: every kept batch, oldest first: its partition's (weakly: a handle dropped takes
        #: its batches with it) and its size
        self._order: deque[tuple[weakref.ref[CachedBatches], int]] = deque()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def put(self, part: CachedBatches, base_offset: int, count: int, raw: memoryview) -> None:
        """Keep ``raw``, one produced batch of ``count`` records that the log appended at
        ``base_offset``, with its base offset and leader epoch rewritten. A batch that does
        not follow the partition's last cached one starts over after a gap (fine: fetches
        read gaps from storage); one that would go before it is not kept."""
        size = len(raw)
        if size > self.max_bytes:
            return
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(raw, _LAST_OFFSET_DELTA_AT)
        if delta != count - 1 or (part.lasts and base_offset <= part.lasts[-1]):
            return
        blob = bytearray(raw)
        _BASE_OFFSET.pack_into(blob, 0, base_offset)
        blob[_LEADER_EPOCH_AT : _LEADER_EPOCH_AT + 4] = _NO_EPOCH
        part.bases.append(base_offset)
        part.lasts.append(base_offset + count - 1)
        part.blobs.append(bytes(blob))
        self._order.append((weakref.ref(part), size))
        self.bytes += size
        while self.bytes > self.max_bytes:
            ref, n = self._order.popleft()
            oldest = ref()
            if oldest is not None:
                oldest._evict_oldest()
            self.bytes -= n

    def take(
        self, part: CachedBatches, index: int, end: int, budget: int, at_least_one: bool
    ) -> tuple[list[bytes], int, int]:
        """Cached batches from ``index`` on while they are contiguous, end below ``end``
        and fit ``budget`` bytes (the first one whatever its size with ``at_least_one``):
        (their bytes, the offset after the last, how many records)."""
        out: list[bytes] = []
        bases, lasts, blobs = part.bases, part.lasts, part.blobs
        size = records = 0
        nxt = bases[index]
        while index < len(bases) and bases[index] == nxt and lasts[index] < end:
            blob = blobs[index]
            if size + len(blob) > budget and not (at_least_one and not out):
                break
            out.append(blob)
            size += len(blob)
            records += lasts[index] - nxt + 1
            nxt = lasts[index] + 1
            index += 1
        return out, nxt, records
