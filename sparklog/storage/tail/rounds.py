"""Flush rounds: one object per round for every partition a broker leads, committed in order.

``RoundWriter`` is a broker's one writer of tail rounds (``sparklog.storage.tail.objects``).
Each ``PartitionLog`` on object storage holds a ``PartitionTail``; an append tells it the
active segment grew. Every ``flush_ms`` (sooner once ``flush_bytes`` are waiting) the writer
*cuts* a round: from each partition with new bytes, the run of its active segment file
between what earlier rounds took and its current end. The round is uploaded (create if
absent) and then committed by the broker's ``TailCommitter``: in a cluster one etcd
transaction that compares the leader epoch of every partition in the round and records
its chunks (``sparklog.cluster.tail``); for an embedded broker the upload itself, of the
next round number (``sparklog.storage.tail.embedded``). Only then does a partition's
committed position move - its high watermark, and the acknowledgement of acks=all.

Several rounds may be in flight: uploads run in parallel (``max_in_flight``), commits in
the order rounds were cut, so acknowledgements stay in offset order. A committer that
uploads in order (``ordered``) gets one upload at a time.

Failures:
- a round whose upload or commit fails is dropped with every round cut after it; each
  partition's next round starts again from its committed position, so the bytes are
  taken again (the segment file still holds them). Waiters keep waiting; ``timeout_ms``
  after they began, uncommitted, they fail with ``TailUnavailableError`` (the records may
  still be committed later: their producer retries, and an idempotent one is deduplicated);
- a commit that finds a partition fenced (another claim of its tail) fails that partition's
  waiters with the committer's error and stops taking its bytes; the round is committed
  again without it;
- a committer that finds another writer of its rounds (``ForeignWriterError``: two
  embedded brokers on one root) fails every partition with it.
Dropped and fenced rounds leave uploaded objects nobody committed: ``collect_rounds``
removes them after a delay.

Thread-safety: ``PartitionTail`` methods may be called from any thread; the writer runs on
its own threads (one cutting and committing, ``max_in_flight`` uploading).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from sparklog.errors import ForeignWriterError, SparkLogError, TailUnavailableError
from sparklog.storage import crashpoints
from sparklog.storage.active import FILE_HEADER_SIZE, ActiveSegment
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.tail.objects import Chunk, TailEntry, encode

log = logging.getLogger(__name__)
crashpoints.register("tail.after_upload", "tail.after_commit")

TopicPartition = tuple[str, int]


class TailCommitter(Protocol):
    """Where a broker's tail is committed (etcd in a cluster, the bucket when embedded)."""

    #: True when uploads must happen one at a time, in round order (the upload commits)
    ordered: bool

    def upload(self, seq: int, data: bytes) -> str:
        """Write round ``seq``'s object; returns its path relative to the root."""
        ...

    def commit(self, seq: int, entries: list[TailEntry]) -> dict[TopicPartition, SparkLogError]:
        """Record ``entries`` (of an uploaded round) as committed, each partition only if
        this broker still leads it at the entry's epoch; returns the partitions refused,
        with why. Raises if nothing could be committed (unreachable)."""
        ...

    def next_seq(self) -> int:
        """The number of the next round to cut."""
        ...

    def object_path(self, seq: int) -> str:
        """Round ``seq``'s object, relative to the storage root."""
        ...


@dataclass
class _Inflight:
    seq: int
    generation: int
    entries: list[TailEntry]
    upload: Future[str]


class PartitionTail:
    """A partition's place in its broker's rounds (module docstring)."""

    def __init__(
        self,
        writer: RoundWriter,
        topic: str,
        partition: int,
        epoch: int,
        segment: ActiveSegment,
        committed: LogPosition,
        claim: str = "",
    ) -> None:
        self.writer = writer
        self.topic = topic
        self.partition = partition
        self.epoch = epoch
        #: the claim its chunks are committed under (``TailEntry.claim``)
        self.claim = claim
        self._cond = threading.Condition()
        self._segment = segment
        self._committed = committed
        self._taken = committed.position  # file position up to which rounds took bytes
        self._error: BaseException | None = None
        #: end position of each chunk taken but not committed -> the offset after it
        self._pending_offsets: dict[int, int] = {}
        #: chunks taken from the active segment (a take-over rebuilds it with a GET each)
        self.chunks = 0

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def committed(self) -> LogPosition:
        return self._committed

    def appended(self, nbytes: int) -> None:
        """The active segment grew by ``nbytes`` (called by the log after an append)."""
        self.writer.poke(nbytes)

    def take(self, object_path: str) -> Chunk | None:
        """The bytes rounds have not taken yet (the writer cuts a round)."""
        with self._cond:
            if self._error is not None:
                return None
            seg = self._segment
            size, next_offset = seg.end
            if size <= self._taken:
                return None
            start, self._taken = self._taken, size
            base = self._offset_at(start)
            self.chunks += 1
            self._pending_offsets[size] = next_offset
        data = seg.buffer()[start:size].to_pybytes()
        entry = TailEntry(
            self.topic,
            self.partition,
            self.epoch,
            seg.name,
            start,
            size,
            base,
            next_offset,
            object_path,
            0,
            self.claim,
        )
        return Chunk(entry, data)

    def full(self) -> bool:
        """Whether the active segment holds ``max_chunks`` chunks: it rolls (its seal
        drops them), which bounds the GETs of a take-over's rebuild and the keys in etcd."""
        return self.chunks >= self.writer.max_chunks

    def _offset_at(self, position: int) -> int:
        """The offset of the first record at file ``position`` (a frame boundary a round
        ended at, so the committed position or the end of an earlier round's chunk)."""
        if position == self._committed.position:
            return self._committed.offset
        return self._pending_offsets[position]

    def rewind(self) -> None:
        """Rounds after the committed position were dropped: take their bytes again."""
        with self._cond:
            self._taken = self._committed.position
            self._pending_offsets.clear()

    def advanced(self, entry: TailEntry) -> None:
        """``entry`` was committed: move the committed position to its end."""
        with self._cond:
            if entry.segment != self._segment.name or entry.end <= self._committed.position:
                return
            self._committed = LogPosition(self._segment.base_offset, entry.end, entry.next)
            self._taken = max(self._taken, entry.end)
            for end in [p for p in self._pending_offsets if p < entry.end]:
                del self._pending_offsets[end]
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """The partition may commit nothing more (fenced, or the log was given up)."""
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()
        self.writer.unregister(self)

    def wait(self, next_offset: int) -> LogPosition:
        """Block until every offset below ``next_offset`` is committed; the committed
        position. Raises the partition's error, or ``TailUnavailableError`` if that has
        not happened within ``timeout_ms`` of the call."""
        timeout = self.writer.timeout_ms / 1000
        with self._cond:
            began = time.monotonic()
            while self._committed.offset < next_offset:
                if self._error is not None:
                    raise self._error
                left = timeout - (time.monotonic() - began)
                if left <= 0:
                    raise TailUnavailableError(
                        f"{self.topic}-{self.partition}: records up to offset {next_offset} "
                        f"not committed within {self.writer.timeout_ms} ms "
                        f"({self.writer.last_failure or 'no round committed'})"
                    )
                self._cond.wait(min(left, 0.5))
            return self._committed

    def switch(self, segment: ActiveSegment) -> None:
        """The log rolled to ``segment`` (every byte of the old one committed)."""
        with self._cond:
            self._segment = segment
            self._committed = LogPosition(
                segment.base_offset, FILE_HEADER_SIZE, segment.base_offset
            )
            self._taken = FILE_HEADER_SIZE
            self._pending_offsets.clear()
            self.chunks = 0


@dataclass
class RoundStats:
    """What the writer did (benchmarks, ``/metrics``)."""

    rounds: int = 0
    bytes: int = 0
    chunks: int = 0
    failures: int = 0
    commit_seconds: list[float] = field(default_factory=list)


class RoundWriter:
    """A broker's writer of tail rounds (module docstring)."""

    def __init__(
        self,
        committer: TailCommitter,
        *,
        flush_ms: int = 25,
        flush_bytes: int = 8 * 1024 * 1024,
        max_in_flight: int = 4,
        timeout_ms: int = 10_000,
        max_chunks: int = 256,
        writer: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.committer = committer
        self.flush_ms = flush_ms
        self.flush_bytes = flush_bytes
        self.max_in_flight = 1 if committer.ordered else max_in_flight
        #: rounds cut and not yet committed (an ordered committer numbers a round when
        #: it is cut, and a failed one is cut again under the same number)
        self._max_queued = 1 if committer.ordered else max_in_flight * 2
        self.timeout_ms = timeout_ms
        self.max_chunks = max_chunks
        self.writer = writer
        self._clock = clock
        self._cond = threading.Condition()
        self._tails: dict[TopicPartition, PartitionTail] = {}
        self._pending = 0
        self._generation = 0
        self._inflight: deque[_Inflight] = deque()
        self._closed = False
        self.last_failure = ""
        self.stats = RoundStats()
        self._uploads = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="sparklog-round")
        self._cutter = threading.Thread(target=self._cut_loop, name="sparklog-rounds", daemon=True)
        self._committer = threading.Thread(
            target=self._commit_loop, name="sparklog-round-commit", daemon=True
        )
        self._cutter.start()
        self._committer.start()

    # ------------------------------------------------------------------ partitions

    def register(
        self,
        topic: str,
        partition: int,
        epoch: int,
        segment: ActiveSegment,
        committed: LogPosition,
        claim: str = "",
    ) -> PartitionTail:
        tail = PartitionTail(self, topic, partition, epoch, segment, committed, claim)
        with self._cond:
            old = self._tails.get(tail.key)
            self._tails[tail.key] = tail
        if old is not None:
            old.fail(SparkLogError(f"{topic}-{partition}: reopened"))
        return tail

    def unregister(self, tail: PartitionTail) -> None:
        with self._cond:
            if self._tails.get(tail.key) is tail:
                del self._tails[tail.key]

    def poke(self, nbytes: int) -> None:
        with self._cond:
            self._pending += nbytes
            if self._pending >= self.flush_bytes or self._pending == nbytes:
                self._cond.notify_all()

    # ------------------------------------------------------------------ cutting

    def _cut_loop(self) -> None:
        last = 0.0
        while True:
            with self._cond:
                while not self._closed and (
                    self._pending == 0 or len(self._inflight) >= self._max_queued
                ):
                    self._cond.wait()
                if self._closed:
                    return
                due = last + self.flush_ms / 1000
                while not self._closed and self._pending < self.flush_bytes:
                    left = due - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed:
                    return
                self._pending = 0
                last = time.monotonic()
                generation = self._generation
                tails = list(self._tails.values())
            try:  # outside the lock: appends go on poking while the bytes are copied
                self._cut(generation, tails)
            except Exception as e:  # a round that cannot even be built: logged, cut again
                log.exception("cutting a tail round failed")
                with self._cond:
                    self._fail_locked(f"cutting a round: {e}")

    def _cut(self, generation: int, tails: list[PartitionTail]) -> None:
        seq = self.committer.next_seq()
        object_path = self.committer.object_path(seq)
        chunks = [c for c in (tail.take(object_path) for tail in tails) if c is not None]
        if not chunks:
            return
        data, entries = encode(self.writer, seq, int(self._clock() * 1000), chunks)
        with self._cond:
            if generation != self._generation:
                # rounds were dropped while this one was cut: its bytes were taken after
                # the partitions rewound, so they rewind again (no round of the new
                # generation exists yet: only this thread cuts)
                for tail in self._tails.values():
                    tail.rewind()
                self._pending += 1
                return
            fut = self._uploads.submit(self.committer.upload, seq, data)
            self._inflight.append(_Inflight(seq, generation, entries, fut))
            self.stats.rounds += 1
            self.stats.bytes += len(data)
            self.stats.chunks += len(chunks)
            self._cond.notify_all()

    def _fail_locked(self, why: str) -> None:
        """Drop every round in flight; partitions take their bytes again from what is
        committed."""
        self.last_failure = why
        self.stats.failures += 1
        self._generation += 1
        self._inflight.clear()
        for tail in self._tails.values():
            tail.rewind()
            self._pending += 1  # cut again
        self._cond.notify_all()

    # ------------------------------------------------------------------ committing

    def _commit_loop(self) -> None:
        backoff = 0.02
        while True:
            with self._cond:
                while not self._closed and not self._inflight:
                    self._cond.wait()
                if self._closed:
                    return
                r = self._inflight[0]
            try:
                r.upload.result()
                crashpoints.hit("tail.after_upload")  # an object nobody committed: gc's
                began = time.perf_counter()
                entries = r.entries
                while entries:
                    refused = self.committer.commit(r.seq, entries)
                    if not refused:
                        break
                    self._refuse(refused)
                    entries = [e for e in entries if (e.topic, e.partition) not in refused]
                crashpoints.hit("tail.after_commit")  # committed, not yet acknowledged
                self.stats.commit_seconds.append(time.perf_counter() - began)
                del self.stats.commit_seconds[:-10000]
            except ForeignWriterError as e:  # another writer's round: nothing more commits
                log.error("%s", e)
                with self._cond:
                    every = list(self._tails.values())
                    self._inflight.clear()
                for each in every:
                    each.fail(e)
                continue
            except Exception as e:
                log.warning("tail round %d not committed: %s", r.seq, e)
                with self._cond:
                    if r.generation == self._generation:
                        self._fail_locked(f"round {r.seq}: {e}")
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.02
            with self._cond:
                if self._inflight and self._inflight[0] is r:
                    self._inflight.popleft()
                tails = dict(self._tails)
                self._cond.notify_all()
            for entry in r.entries:
                owner = tails.get((entry.topic, entry.partition))
                if owner is not None and (owner.epoch, owner.claim) == (entry.epoch, entry.claim):
                    owner.advanced(entry)  # (a chunk of an earlier claim's tail: not its)

    def _refuse(self, refused: dict[TopicPartition, SparkLogError]) -> None:
        for key, error in refused.items():
            with self._cond:
                tail = self._tails.get(key)
            if tail is not None:
                tail.fail(error)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._cutter.join(5)
        self._committer.join(5)
        self._uploads.shutdown(wait=False, cancel_futures=True)
