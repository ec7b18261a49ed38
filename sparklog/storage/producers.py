"""Idempotent-producer state of one partition, kept beside its log (Kafka's
``ProducerStateManager``): a new writer of the partition - a restarted broker, or in
cluster mode the partition's next leader - rebuilds it from storage alone.

``ProducerStates`` keeps for each producer id its epoch and its last five
batches ``(first sequence, last sequence, first offset, last offset)``. For a new batch:

- an epoch below the current one is fenced: INVALID_PRODUCER_EPOCH;
- a batch equal to one of the last five is a retry: it is answered with its original
  offsets and nothing is written;
- a batch wholly before the last five (its sequences all below the next expected one) was
  written long ago: DUPLICATE_SEQUENCE_NUMBER, which a producer takes as "already written"
  (Kafka's Java producer does; sparklog's Spark sink replays whole micro-batches with the
  same producer id and sequences after a restart, and relies on it);
- otherwise its first sequence must follow the last one (``last + 1``, wrapping at 2^31;
  0 for a new producer or a new epoch): else OUT_OF_ORDER_SEQUENCE_NUMBER, or
  UNKNOWN_PRODUCER_ID when the partition has no state for the producer at all.

Snapshot (``<partition>/producer-state.json``, ``names.PRODUCER_STATE_FILE``, replaced
atomically)::

    {"format": 1, "offset": N,
     "producers": {"<pid>": {"epoch": e, "batches": [[fs, ls, fo, lo], ...]}}}

``offset`` is the log end the snapshot covers (everything below it is durable). The
partition log (``sparklog.storage.log``) writes one when its active segment rolls and when
it closes; on open it loads the snapshot (``read_snapshot``; an unreadable one is logged
and ignored) and replays the producer columns of the records from ``offset`` on
(``ProducerStates.replay``). The snapshot is not a segment, so retention never deletes it:
producer state survives retention and restarts. It is derived data: losing it costs only
the state of producers whose last records retention has deleted.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import (
    CorruptMetadataError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerError,
)
from sparklog.storage import names
from sparklog.storage.fs import FileSystem

log = logging.getLogger(__name__)

MAX_BATCHES = 5
SEQ_MOD = 2**31


@dataclass(frozen=True)
class ProducerBatch:
    """The idempotence identity of an appended batch: producer id and epoch, and the
    sequence of its first record; ``count`` records follow it consecutively."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int


@dataclass(frozen=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))


class ProducerStates:
    """Idempotence state of one partition; see the module docstring. Not thread-safe: the
    partition log calls it under its append lock."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.covered_offset = 0

    def check(
        self, producer_id: int, epoch: int, first_seq: int, count: int, label: str
    ) -> BatchMeta | None:
        """None if the batch is new and in order; its original BatchMeta if a retry."""
        entry = self.producers.get(producer_id)
        last_seq = (first_seq + count - 1) % SEQ_MOD
        if entry is None:
            if first_seq != 0:
                raise UnknownProducerError(
                    f"{label}: producer {producer_id} is unknown here and starts at sequence "
                    f"{first_seq}, not 0"
                )
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{label}: producer {producer_id} epoch {epoch} is fenced by epoch {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"{label}: producer {producer_id} new epoch {epoch} starts at sequence "
                    f"{first_seq}, not 0"
                )
            return None
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
            # a batch rebuilt from the log (``replay``) may be several produce batches run
            # together (sealed segments keep no batch boundaries): a retry of any of them
            # lies wholly inside it, at the same distance from its start in both numberings
            into = (first_seq - b.first_seq) % SEQ_MOD
            if into + count - 1 <= (b.last_seq - b.first_seq) % SEQ_MOD:
                first = b.first_offset + into
                return BatchMeta(first_seq, last_seq, first, first + count - 1)
        expected = (entry.batches[-1].last_seq + 1) % SEQ_MOD if entry.batches else 0
        behind_first = (expected - first_seq) % SEQ_MOD
        if 0 < behind_first < SEQ_MOD // 2 and count <= behind_first:
            raise DuplicateSequenceError(
                f"{label}: producer {producer_id} epoch {epoch} sequences {first_seq}.."
                f"{last_seq} were written before (next expected {expected})"
            )
        if first_seq != expected:
            raise OutOfOrderSequenceError(
                f"{label}: producer {producer_id} epoch {epoch} sent sequence {first_seq}, "
                f"expected {expected}"
            )
        return None

    def update(
        self, producer_id: int, epoch: int, first_seq: int, count: int, first_offset: int
    ) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)
            self.producers[producer_id] = entry
        entry.batches.append(
            BatchMeta(
                first_seq, (first_seq + count - 1) % SEQ_MOD, first_offset, first_offset + count - 1
            )
        )
        self.covered_offset = max(self.covered_offset, first_offset + count)

    def replay(self, batches: list[pa.RecordBatch]) -> None:
        """Rebuild state from stored records (offset order): runs of consecutive sequences
        of one producer and epoch become batches."""
        for batch in batches:
            pids = batch.column("producer_id")
            mask = pc.greater_equal(pids, 0)
            sub = batch.filter(mask)
            if sub.num_rows == 0:
                if batch.num_rows:
                    last = batch.column("offset")[batch.num_rows - 1].as_py()
                    self.covered_offset = max(self.covered_offset, last + 1)
                continue
            rows = zip(
                sub.column("offset").to_pylist(),
                sub.column("producer_id").to_pylist(),
                sub.column("producer_epoch").to_pylist(),
                sub.column("sequence").to_pylist(),
                strict=True,
            )
            run: list[int] | None = None  # [pid, epoch, first_seq, last_seq, first_off, last_off]
            for off, pid, epoch, seq in rows:
                if (
                    run is not None
                    and run[0] == pid
                    and run[1] == epoch
                    and seq == (run[3] + 1) % SEQ_MOD
                    and off == run[5] + 1
                ):
                    run[3], run[5] = seq, off
                    continue
                if run is not None:
                    self._add_run(run)
                run = [pid, epoch, seq, seq, off, off]
            if run is not None:
                self._add_run(run)
            last = batch.column("offset")[batch.num_rows - 1].as_py()
            self.covered_offset = max(self.covered_offset, last + 1)

    def _add_run(self, run: list[int]) -> None:
        pid, epoch, first_seq, last_seq, first_off, last_off = run
        entry = self.producers.get(pid)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)
            self.producers[pid] = entry
        elif epoch < entry.epoch:
            return
        entry.batches.append(BatchMeta(first_seq, last_seq, first_off, last_off))

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": 1,
                "offset": self.covered_offset,
                "producers": {
                    str(pid): {
                        "epoch": e.epoch,
                        "batches": [
                            [b.first_seq, b.last_seq, b.first_offset, b.last_offset]
                            for b in e.batches
                        ],
                    }
                    for pid, e in self.producers.items()
                },
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> ProducerStates:
        states = cls()
        try:
            d = json.loads(data)
            states.covered_offset = int(d["offset"])
            for pid, e in d["producers"].items():
                entry = ProducerEntry(int(e["epoch"]))
                for fs_, ls, fo, lo in e["batches"]:
                    entry.batches.append(BatchMeta(int(fs_), int(ls), int(fo), int(lo)))
                states.producers[int(pid)] = entry
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where}: unreadable producer snapshot: {e}") from e
        return states


def read_snapshot(fs: FileSystem, partition_path: str) -> ProducerStates | None:
    """The partition's producer snapshot; None if there is none or it is unreadable."""
    path = fs.join(partition_path, names.PRODUCER_STATE_FILE)
    try:
        return ProducerStates.from_json(fs.read_bytes(path), path)
    except FileNotFoundError:
        return None
    except CorruptMetadataError as e:
        log.warning("%s; rebuilding producer state from the log", e)
        return None


def write_snapshot(fs: FileSystem, partition_path: str, states: ProducerStates) -> None:
    fs.write_atomic(fs.join(partition_path, names.PRODUCER_STATE_FILE), states.to_json())
