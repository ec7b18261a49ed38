"""Committed consumer-group offsets, stored in sparklog's own log.

Like Kafka, the broker keeps commits in an internal compacted topic, ``__consumer_offsets``
(``OFFSETS_PARTITIONS`` partitions; a group's commits go to partition
``crc32(group) % OFFSETS_PARTITIONS``). Each commit is one record per partition committed:

    key   = JSON ["offset", group, topic, partition]
    value = JSON {"offset": o, "leader_epoch": e, "metadata": m, "commit_ms": t}, or null
            (a tombstone: the group's offset for that partition was deleted)

A commit is answered only after its records are fsynced (the same group commit as
produce), so committed offsets survive a broker restart and SIGKILL.

Transactional commits (``TxnOffsetCommit``) are the same records written as the
transaction's (producer id and epoch, the transactional bit): they are held apart
(``pending``) until the transaction coordinator writes its marker to the partition, and
become the group's offsets on a commit marker, or vanish on an abort (``complete_txn``).
Replaying the partition does the same from the stored records and markers. On start the broker
replays the topic into memory; compaction (cleanup.policy=compact) keeps it small. The
records are ordinary rows, so Spark can read them like any other topic.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from sparklog.broker.partitions import PartitionManager
from sparklog.storage.control import CONTROL, CONTROL_COMMIT, TRANSACTIONAL, control_type
from sparklog.storage.producers import ProducerBatch

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 8


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


@dataclass(frozen=True)
class CommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


def offsets_partition(group: str) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (its leader coordinates the group
    in cluster mode)."""
    return zlib.crc32(group.encode()) % OFFSETS_PARTITIONS


def _key(group: str, topic: str, partition: int) -> bytes:
    return json.dumps(["offset", group, topic, partition]).encode()


class OffsetStore:
    """Committed offsets of every group: in memory, backed by ``__consumer_offsets``."""

    def __init__(self, manager: PartitionManager) -> None:
        self.manager = manager
        self.offsets: dict[str, dict[tuple[str, int], Committed]] = {}
        #: transactional commits not yet decided: (offsets partition, producer id) -> records
        self.pending: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}

    def ensure_topic(self) -> int:
        """Create ``__consumer_offsets`` if missing; its partition count."""
        return self.manager.ensure_internal_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS)

    def load(self) -> None:
        """Embedded mode: replay every partition of ``__consumer_offsets``."""
        loaded = sum(self.load_partition(p) for p in range(self.ensure_topic()))
        log.info("loaded %d offset commit records for %d groups", loaded, len(self.offsets))

    def load_partition(self, partition: int) -> int:
        """Replay one partition of ``__consumer_offsets`` (its groups' commits; cluster mode
        does this when the broker takes the partition over); the records read."""
        self.drop_partition(partition)
        plog = self.manager.partition(OFFSETS_TOPIC, partition).log
        if plog.high_watermark <= plog.log_start_offset:
            return 0
        loaded = 0
        for batch in plog.batches(plog.log_start_offset):
            for key, value, pid, attrs in zip(
                batch.column("key").to_pylist(),
                batch.column("value").to_pylist(),
                batch.column("producer_id").to_pylist(),
                batch.column("attributes").to_pylist(),
                strict=True,
            ):
                if attrs & CONTROL:
                    self.complete_txn(partition, pid, control_type(key) == CONTROL_COMMIT)
                elif attrs & TRANSACTIONAL:
                    self.pending.setdefault((partition, pid), []).append((key, value))
                else:
                    self._apply(key, value)
                loaded += 1
        return loaded

    def drop_partition(self, partition: int) -> None:
        """Forget the groups of one ``__consumer_offsets`` partition (cluster mode: another
        broker leads it now, and coordinates them)."""
        for group in [g for g in self.offsets if offsets_partition(g) == partition]:
            del self.offsets[group]
        for key in [k for k in self.pending if k[0] == partition]:
            del self.pending[key]

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker reached the partition: the producer's pending commits apply or vanish."""
        for key, value in self.pending.pop((partition, producer_id), []):
            if commit:
                self._apply(key, value)

    def unstable(self, group: str) -> set[tuple[str, int]]:
        """Partitions of ``group`` with a transactional commit still undecided (KIP-447:
        OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them)."""
        out: set[tuple[str, int]] = set()
        for (partition, _pid), records in self.pending.items():
            if partition != offsets_partition(group):
                continue
            for key, _ in records:
                _kind, g, topic, p = json.loads(key)
                if g == group:
                    out.add((topic, int(p)))
        return out

    async def txn_commit(
        self, group: str, producer_id: int, producer_epoch: int, entries: Iterable[CommitEntry]
    ) -> None:
        """TxnOffsetCommit: write the commits as the transaction's records (durably); they
        apply when its commit marker arrives."""
        records = self._records(group, entries)
        if not records:
            return
        partition = offsets_partition(group)
        handle = self.manager.partition(OFFSETS_TOPIC, partition)
        producer = ProducerBatch(producer_id, producer_epoch, -1, len(records), transactional=True)
        result = handle.log.append(self._batch(records), producer=producer, durable=False)
        await self.manager.wait_durable(handle, result.last_offset + 1)
        self.pending.setdefault((partition, producer_id), []).extend(records)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            kind, group, topic, partition = json.loads(key)
        except (ValueError, TypeError):
            return
        if kind != "offset":
            return
        group_offsets = self.offsets.setdefault(group, {})
        if value is None:
            group_offsets.pop((topic, int(partition)), None)
            if not group_offsets:
                del self.offsets[group]
            return
        v = json.loads(value)
        group_offsets[(topic, int(partition))] = Committed(
            int(v["offset"]),
            int(v.get("leader_epoch", -1)),
            v.get("metadata"),
            int(v.get("commit_ms", 0)),
        )

    @staticmethod
    def _batch(records: Sequence[tuple[bytes, bytes | None]]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [
                pa.array([k for k, _ in records], pa.binary()),
                pa.array([v for _, v in records], pa.binary()),
            ],
            names=["key", "value"],
        )

    async def _write(self, group: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        handle = self.manager.partition(OFFSETS_TOPIC, offsets_partition(group))
        result = handle.log.append(self._batch(records), durable=False)
        await self.manager.wait_durable(handle, result.last_offset + 1)
        for k, v in records:
            self._apply(k, v)

    @staticmethod
    def _records(group: str, entries: Iterable[CommitEntry]) -> list[tuple[bytes, bytes | None]]:
        now = int(time.time() * 1000)
        return [
            (
                _key(group, e.topic, e.partition),
                json.dumps(
                    {
                        "offset": e.offset,
                        "leader_epoch": e.leader_epoch,
                        "metadata": e.metadata,
                        "commit_ms": now,
                    }
                ).encode(),
            )
            for e in entries
        ]

    async def commit(self, group: str, entries: Iterable[CommitEntry]) -> None:
        records = self._records(group, entries)
        if records:
            await self._write(group, records)

    async def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> None:
        """OffsetDelete: tombstones for the group's committed offsets of ``partitions``
        (partitions with none are skipped)."""
        have = self.offsets.get(group, {})
        keys = [_key(group, t, p) for (t, p) in partitions if (t, p) in have]
        if keys:
            await self._write(group, [(k, None) for k in keys])

    async def delete_group(self, group: str) -> None:
        keys = [_key(group, t, p) for (t, p) in self.offsets.get(group, {})]
        if keys:
            await self._write(group, [(k, None) for k in keys])

    def committed(self, group: str) -> dict[tuple[str, int], Committed]:
        return dict(self.offsets.get(group, {}))
