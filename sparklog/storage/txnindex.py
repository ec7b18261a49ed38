"""A partition's transactions as readers see them: the last stable offset and the aborted
transactions (Kafka's LSO and transaction index), for readers in any process.

The writer (``PartitionLog``) keeps this in memory (``sparklog.storage.producers``) and,
after a group-commit fsync in which it changed, replaces the checkpoint
``transactions.checkpoint`` (``transactions.e<epoch>.checkpoint`` for an epoch-named active
segment, as the high watermark) *before* it moves the high watermark::

    {"format": 1, "open_first": N | null,
     "aborted": [[producer_id, first_offset, last_offset], ...]}

``open_first`` is the first offset of the oldest open transaction (null: none is open).
A reader reads the high watermark first and this file second, so the file it gets is at
least as new as the watermark: every transaction with records below
``lso = min(open_first, high watermark)`` is decided, and the aborted ones are listed. A
partition that never saw a transaction has no file: its LSO is the high watermark.
The file is derived data (the writer rebuilds it from the log when it opens), replaced
atomically, never fsynced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names
from sparklog.storage.control import CONTROL, any_transactional
from sparklog.storage.fs import FileSystem
from sparklog.storage.producers import AbortedTxn
from sparklog.storage.versioned import on_object_store


@dataclass(frozen=True)
class TxnIndex:
    """The last stable offset's input and the aborted transactions of one partition."""

    open_first: int | None = None
    aborted: tuple[AbortedTxn, ...] = ()

    def last_stable_offset(self, high_watermark: int) -> int:
        if self.open_first is None:
            return high_watermark
        return min(self.open_first, high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in ``[start, end)``."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def to_json(self) -> bytes:
        return json.dumps(
            {"format": 1, "open_first": self.open_first, "aborted": [list(a) for a in self.aborted]}
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> TxnIndex:
        try:
            d = json.loads(data)
            first = d["open_first"]
            return cls(
                None if first is None else int(first),
                tuple(AbortedTxn(int(p), int(f), int(la)) for p, f, la in d["aborted"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where}: unreadable transaction index: {e}") from e


NO_TRANSACTIONS = TxnIndex()


def read_txn_index(fs: FileSystem, partition_path: str, active_segment: str) -> TxnIndex:
    """The index for readers of the active segment ``active_segment``. A new leader writes
    its epoch's file before it serves; until then, the newest older epoch's file still
    tells the truth about every record it left (nothing new is decided meanwhile)."""
    name = names.txn_index_file(active_segment)
    path = fs.join(partition_path, name)
    try:  # read first, list only when the epoch's file is missing: one GET on an object store
        return TxnIndex.from_json(fs.read_bytes(path), path)
    except FileNotFoundError:
        if name == names.TXN_INDEX_FILE:
            return NO_TRANSACTIONS
    key = (partition_path, name)
    for listed in (False, True):
        older = _older_index.get(key) if not listed else None
        if older is None:
            older = _newest_older(fs, partition_path, name)
            if on_object_store(fs):
                # an object store: remembered, so a reader does not list the partition on
                # every read until the new leader writes its file (or forever, when no
                # transaction touches the partition); no file of an older epoch appears
                # once a newer epoch began
                _older_index[key] = older
        if not older:
            return NO_TRANSACTIONS
        path = fs.join(partition_path, older)
        try:
            return TxnIndex.from_json(fs.read_bytes(path), path)
        except FileNotFoundError:
            continue  # removed since it was listed: list again
    return NO_TRANSACTIONS


#: (partition, an epoch's missing file) -> the newest older epoch's file ("": none)
_older_index: dict[tuple[str, str], str] = {}


def _newest_older(fs: FileSystem, partition_path: str, name: str) -> str:
    """The newest epoch's transaction index older than ``name`` ("" if none)."""
    older = sorted(
        n for n in fs.listdir(partition_path) if names.txn_index_epoch(n) is not None and n < name
    )
    return older[-1] if older else ""


def has_index(fs: FileSystem, partition_path: str, listing: Iterable[str] | None = None) -> bool:
    """Whether a writer of the partition ever wrote a transaction index (``listing``: the
    directory's names, listed a moment ago by the caller; else it is listed here)."""
    found = fs.listdir(partition_path) if listing is None else listing
    return any(names.is_txn_index_file(n) for n in found)


def write_txn_index(
    fs: FileSystem, partition_path: str, active_segment: str, idx: TxnIndex
) -> None:
    fs.write_atomic(fs.join(partition_path, names.txn_index_file(active_segment)), idx.to_json())


def visible(batch: pa.RecordBatch, txn: TxnIndex, *, committed: bool) -> pa.RecordBatch:
    """``batch`` as a consumer sees it: never its control records (transaction markers),
    and with ``committed`` (``read_committed``) none of the records of aborted
    transactions either. Needs the ``offset``, ``producer_id`` and ``attributes`` columns
    (a batch without ``attributes`` is returned as it is). A batch with no transactional
    record costs one min/max."""
    if "attributes" not in batch.schema.names or not batch.num_rows:
        return batch
    attrs = batch.column("attributes")
    if not any_transactional(attrs):
        return batch
    keep = pc.equal(pc.bit_wise_and(attrs, pa.scalar(CONTROL, pa.int8())), 0)
    if committed and txn.aborted:
        offsets = batch.column("offset")
        first, last = offsets[0].as_py(), offsets[batch.num_rows - 1].as_py()
        pids = batch.column("producer_id")
        for a in txn.aborted_between(first, last + 1):
            hit = pc.and_(
                pc.equal(pids, a.producer_id),
                pc.and_(
                    pc.greater_equal(offsets, a.first_offset), pc.less_equal(offsets, a.last_offset)
                ),
            )
            keep = pc.and_(keep, pc.invert(hit))
    return batch.filter(keep)
