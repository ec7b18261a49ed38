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

Transactions (Kafka's ``ProducerStateManager`` and transaction index, in one place): a
transactional batch (``ProducerBatch.transactional``) opens its producer's transaction in
this partition at its first offset, unless one is open; a marker (``marker``: a control
record, ``sparklog.storage.records``) closes it. A marker's epoch may be above the
producer's (the coordinator fenced it), never below. An aborted transaction is kept as
``AbortedTxn(producer id, first offset, last offset = the marker's)``: Fetch returns those
that overlap what it reads, so a ``read_committed`` consumer drops their records. The last
stable offset (``txnindex.TxnIndex``) is the first offset of the oldest open transaction,
or the high watermark when none is open. Retention forgets aborted transactions wholly
below the log start (``trim``).

Snapshot (``<partition>/producer-state.json``, ``names.PRODUCER_STATE_FILE``, replaced
atomically)::

    {"format": 2, "offset": N,
     "producers": {"<pid>": {"epoch": e, "batches": [[fs, ls, fo, lo], ...]}},
     "open": {"<pid>": first_offset}, "aborted": [[pid, first_offset, last_offset], ...]}

(format 1 had no ``open`` or ``aborted``: a format-1 snapshot loads with no transactions.)

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
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

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
from sparklog.storage.control import (
    CONTROL,
    CONTROL_COMMIT,
    TRANSACTIONAL,
    any_transactional,
    control_type,
)
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
    transactional: bool = False


@dataclass(frozen=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class AbortedTxn(NamedTuple):
    """An aborted transaction of one partition: its producer and the offsets from its first
    record to its abort marker."""

    producer_id: int
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
        #: producer id -> first offset of its open transaction here
        self.open_txns: dict[int, int] = {}
        #: aborted transactions, in the order of their markers (so by last offset)
        self.aborted: list[AbortedTxn] = []
        #: bumped on every change of the two above (the log rewrites the readers' index)
        self.txn_version = 0
        self._txn_lock = threading.Lock()  # the syncing thread reads them (txn_state)

    def txn_state(self) -> tuple[int, int | None, tuple[AbortedTxn, ...]]:
        """(version, first offset of the oldest open transaction, aborted transactions),
        read consistently from any thread."""
        with self._txn_lock:
            first = min(self.open_txns.values(), default=None)
            return self.txn_version, first, tuple(self.aborted)

    # ------------------------------------------------------------------ transactions

    def check_marker(self, producer_id: int, epoch: int, label: str) -> None:
        """Refuse a marker whose epoch is below the producer's (a fenced coordinator's)."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{label}: marker for producer {producer_id} at epoch {epoch} is fenced by "
                f"epoch {entry.epoch}"
            )

    def marker(self, producer_id: int, epoch: int, commit: bool, offset: int) -> None:
        """Record the marker at ``offset``: the producer's open transaction ends."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            # a marker at a new epoch fences the producer's older batches, as Kafka's does
            self.producers[producer_id] = ProducerEntry(epoch)
        with self._txn_lock:
            first = self.open_txns.pop(producer_id, None)
            if not commit and first is not None:
                self.aborted.append(AbortedTxn(producer_id, first, offset))
            self.txn_version += 1
        self.covered_offset = max(self.covered_offset, offset + 1)

    def _open(self, producer_id: int, offset: int) -> None:
        with self._txn_lock:
            self.open_txns.setdefault(producer_id, offset)
            self.txn_version += 1

    def describe(self) -> list[tuple[int, int, int, int]]:
        """(producer id, epoch, last sequence, first offset of its open transaction or -1)
        of every producer this partition knows (DescribeProducers)."""
        return [
            (pid, e.epoch, e.batches[-1].last_seq if e.batches else -1, self.open_txns.get(pid, -1))
            for pid, e in sorted(self.producers.items())
        ]

    def trim(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below ``log_start_offset``."""
        if self.aborted and self.aborted[0].last_offset < log_start_offset:
            with self._txn_lock:
                self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]
                self.txn_version += 1

    def check_batch(self, batch: ProducerBatch, label: str) -> BatchMeta | None:
        """``check`` of an appended batch; one without sequence numbers (a transactional
        offset commit) is checked by its epoch only (``check_marker``)."""
        if batch.base_sequence < 0:
            self.check_marker(batch.producer_id, batch.producer_epoch, label)
            return None
        return self.check(
            batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.count, label
        )

    def record_batch(self, batch: ProducerBatch, first_offset: int) -> None:
        """``update`` with an appended batch that starts at ``first_offset``."""
        self.update(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.count,
            first_offset,
            transactional=batch.transactional,
        )

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
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        count: int,
        first_offset: int,
        transactional: bool = False,
    ) -> None:
        if transactional and producer_id not in self.open_txns:
            self._open(producer_id, first_offset)
        if first_seq < 0:  # no sequence numbers (a transactional offset commit)
            self.covered_offset = max(self.covered_offset, first_offset + count)
            return
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
        of one producer and epoch become batches; transactional records open transactions
        and control records close them."""
        for batch in batches:
            if "attributes" in batch.schema.names and any_transactional(batch.column("attributes")):
                self._replay_transactional(batch)
                continue
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

    def _replay_transactional(self, batch: pa.RecordBatch) -> None:
        """``replay`` of a batch with transactional or control records, record by record
        (transactions are rare next to plain batches)."""
        keys = batch.column("key").to_pylist() if "key" in batch.schema.names else None
        rows = zip(
            batch.column("offset").to_pylist(),
            batch.column("producer_id").to_pylist(),
            batch.column("producer_epoch").to_pylist(),
            batch.column("sequence").to_pylist(),
            batch.column("attributes").to_pylist(),
            strict=True,
        )
        for i, (off, pid, epoch, seq, attrs) in enumerate(rows):
            self.covered_offset = max(self.covered_offset, off + 1)
            if pid < 0:
                continue
            if attrs & CONTROL:
                commit = keys is not None and control_type(keys[i]) == CONTROL_COMMIT
                self.marker(pid, epoch, commit, off)
                continue
            if seq < 0:
                if attrs & TRANSACTIONAL and pid not in self.open_txns:
                    self._open(pid, off)
                continue
            entry = self.producers.get(pid)
            if entry is not None and epoch < entry.epoch:
                continue
            if entry is not None and entry.batches and entry.epoch == epoch:
                last = entry.batches[-1]
                if seq == (last.last_seq + 1) % SEQ_MOD and off == last.last_offset + 1:
                    entry.batches[-1] = BatchMeta(last.first_seq, seq, last.first_offset, off)
                    if attrs & TRANSACTIONAL and pid not in self.open_txns:
                        self._open(pid, off)
                    continue
            self.update(pid, epoch, seq, 1, off, transactional=bool(attrs & TRANSACTIONAL))

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
                "format": 2,
                "open": {str(pid): first for pid, first in self.open_txns.items()},
                "aborted": [list(a) for a in self.aborted],
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
            states.open_txns = {int(p): int(f) for p, f in d.get("open", {}).items()}
            states.aborted = [
                AbortedTxn(int(p), int(f), int(la)) for p, f, la in d.get("aborted", [])
            ]
            states.txn_version = int(bool(states.open_txns or states.aborted))
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
