"""Small per-partition checkpoint files.

``high-watermark.checkpoint`` (in cluster mode one per leader epoch,
``high-watermark.e<epoch>.checkpoint``: ``names.high_watermark_file``) and
``recovery-point.checkpoint``: 32 bytes, little-endian::

    magic b"SLCP" | crc32c u32 | segment i64 | position i64 | offset i64

``offset`` is the next offset; ``position`` the byte position in the active segment whose
base offset is ``segment`` where that offset begins. The CRC-32C covers the 24 bytes after
itself. Both are overwritten in place (``FileSystem.overwrite_small``): a rename per group
commit cost 1-2 ms on the disks measured, a ``pwrite`` a few microseconds. A reader that
races a write may see a torn mix, which fails the CRC; it reads again
(``read_position``). Neither file is fsynced.

- The high watermark is the visible end of the log: the first offset not yet durable.
  Replaced after every group-commit fsync; readers in other processes never read past it.
  After a crash the writer recomputes it from the recovered log.
- The recovery point is where the log was known whole at the last roll, open or clean
  close. Recovery checks every frame anyway; truncation below it (or below a surviving high
  watermark) means acknowledged data was damaged, and is reported as such.

``leader-epoch.json`` ``{"epochs": [[epoch, start_offset], ...]}``: Kafka's leader-epoch
cache, each leader epoch and the first offset written under it; bumped by a broker on every
start (embedded mode) or lease acquisition (cluster mode); replaced atomically (rename).

The log start offset lives in the manifest (``sparklog.storage.manifest``), whose versions
are atomic and durable by construction.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass

import crc32c

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names, txnindex
from sparklog.storage.fs import FileSystem
from sparklog.storage.producers import AbortedTxn


@dataclass(frozen=True)
class LogPosition:
    """A point in the log: ``offset`` is the next offset, at byte ``position`` of ``segment``."""

    segment: int
    position: int
    offset: int

    def to_bytes(self) -> bytes:
        body = _BODY.pack(self.segment, self.position, self.offset)
        return MAGIC + struct.pack("<I", crc32c.crc32c(body)) + body

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> LogPosition:
        if len(data) != SIZE or data[:4] != MAGIC:
            raise CorruptMetadataError(f"{path}: not a position checkpoint ({len(data)} bytes)")
        (crc,) = struct.unpack_from("<I", data, 4)
        if crc != crc32c.crc32c(data[8:]):
            raise CorruptMetadataError(f"{path}: checkpoint fails its CRC")
        pos = cls(*_BODY.unpack_from(data, 8))
        if min(pos.segment, pos.position, pos.offset) < 0:
            raise CorruptMetadataError(f"{path}: negative value in {pos}")
        return pos


MAGIC = b"SLCP"
_BODY = struct.Struct("<qqq")
SIZE = 8 + _BODY.size
_TORN_READ_RETRIES = 5


def _read(fs: FileSystem, path: str) -> bytes | None:
    try:
        return fs.read_bytes(path)
    except FileNotFoundError:
        return None


def read_position(fs: FileSystem, partition_path: str, file_name: str) -> LogPosition | None:
    """A position checkpoint, or None when absent; CorruptMetadataError when it stays
    unreadable across a few reads (a torn read is retried)."""
    path = fs.join(partition_path, file_name)
    for attempt in range(_TORN_READ_RETRIES):
        data = _read(fs, path)
        if data is None:
            return None
        try:
            return LogPosition.from_bytes(data, path)
        except CorruptMetadataError:
            if attempt == _TORN_READ_RETRIES - 1:
                raise
            time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


def write_position(fs: FileSystem, partition_path: str, file_name: str, pos: LogPosition) -> None:
    fs.overwrite_small(fs.join(partition_path, file_name), pos.to_bytes())


def read_high_watermark(
    fs: FileSystem, partition_path: str, active_segment: str = ""
) -> LogPosition | None:
    """The high watermark of the active segment named ``active_segment``
    (``names.high_watermark_file``: the shared checkpoint when the name carries no epoch)."""
    return read_position(fs, partition_path, names.high_watermark_file(active_segment))


def active_segment_bytes(fs: FileSystem, partition_path: str, active_segment: str) -> int:
    """The bytes of the active segment readers may see (its high-watermark position), as
    retention counts them towards ``retention.bytes``; 0 when the checkpoint is absent,
    unreadable (a writer died mid-write: the next look sees it again) or points into
    another segment (a roll is being committed)."""
    try:
        hwm = read_high_watermark(fs, partition_path, active_segment)
    except CorruptMetadataError:
        return 0
    parsed = names.parse_segment_name(active_segment)
    if hwm is None or parsed is None or hwm.segment != parsed.base_offset:
        return 0
    return hwm.position


def read_leader_epochs(fs: FileSystem, partition_path: str) -> list[tuple[int, int]]:
    path = fs.join(partition_path, names.LEADER_EPOCH_FILE)
    data = _read(fs, path)
    if data is None:
        return []
    try:
        epochs = [(int(e), int(o)) for e, o in json.loads(data)["epochs"]]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptMetadataError(f"{path}: unreadable leader-epoch checkpoint: {e}") from e
    return epochs


def write_leader_epochs(fs: FileSystem, partition_path: str, epochs: list[tuple[int, int]]) -> None:
    path = fs.join(partition_path, names.LEADER_EPOCH_FILE)
    fs.write_atomic(path, json.dumps({"epochs": [list(e) for e in epochs]}).encode())


def end_offset_for_epoch(
    history: list[tuple[int, int]], epoch: int, high_watermark: int
) -> tuple[int, int]:
    """Kafka's OffsetForLeaderEpoch answer from a leader-epoch history ``[(epoch,
    start_offset)]``: ``(the largest epoch <= epoch, the offset where the next epoch
    starts)``; for the current epoch, the high watermark; ``(-1, -1)`` for an epoch newer
    than any (or -1)."""
    history = sorted(history)
    if epoch < 0 or not history:
        return -1, -1
    if epoch == history[-1][0]:
        return epoch, high_watermark
    higher = [(e, start) for e, start in history if e > epoch]
    if not higher:
        return -1, -1
    floor = [e for e, _start in history if e <= epoch]
    return (floor[-1] if floor else epoch), min(higher[0][1], high_watermark)


class LogCheckpoints:
    """The files a partition's writer keeps for its readers in the partition directory
    ``path``: the high watermark of the active segment, the recovery point, and the
    transaction index (``txnindex``, rewritten only when the transaction state changed)."""

    def __init__(self, fs: FileSystem, path: str) -> None:
        self.fs = fs
        self.path = path
        self._txn_written = 0

    def high_watermark(self, active_segment: str, pos: LogPosition) -> None:
        write_position(self.fs, self.path, names.high_watermark_file(active_segment), pos)

    def recovery_point(self, pos: LogPosition) -> None:
        write_position(self.fs, self.path, names.RECOVERY_POINT_FILE, pos)

    def txn_index(
        self,
        active_segment: str,
        state: tuple[int, int | None, tuple[AbortedTxn, ...]],
        force: bool,
    ) -> None:
        """Replace the readers' transaction index if ``state`` (``ProducerStates.txn_state``:
        version, first unstable offset, aborted transactions) changed since the last write."""
        version, first, aborted = state
        if version != self._txn_written or force:
            txnindex.write_txn_index(
                self.fs, self.path, active_segment, txnindex.TxnIndex(first, aborted)
            )
            self._txn_written = version
