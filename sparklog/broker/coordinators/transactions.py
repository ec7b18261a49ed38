"""The transaction coordinator: Kafka's transactions (KIP-98) over sparklog's own log.

Every transactional id has one ``TxnMeta``: the producer id and epoch it holds, its
timeout, its state and the partitions of its open transaction. The states are Kafka's:
``Empty`` (no transaction), ``Ongoing``, ``PrepareCommit`` / ``PrepareAbort`` (the outcome
is decided, markers are being written) and ``CompleteCommit`` / ``CompleteAbort``.

Durable state: the internal compacted topic ``__transaction_state`` (``TXN_PARTITIONS``
partitions; an id lives in partition ``crc32(id) % TXN_PARTITIONS``), one record per state
change, answered only once fsynced::

    key   = JSON ["txn", transactional_id]
    value = JSON {"producer_id": p, "producer_epoch": e, "timeout_ms": t, "state": s,
                  "partitions": [[topic, partition], ...], "start_ms": ms, "update_ms": ms,
                  "last_epoch": e}   (absent in older records: -1)

Ending a transaction (EndTxn, an expired timeout, or InitProducerId fencing an open one) is
a commit sequence of three steps (EndTxn is answered after step 1, as in Kafka; steps 2 and
3 run in the background, and the id's next request waits for them):

1. write ``Prepare{Commit,Abort}``: from here the outcome is decided;
2. write a marker (a control record, ``sparklog.storage.records``) to every partition of the
   transaction, ``__consumer_offsets`` partitions of ``AddOffsetsToTxn`` groups included
   (a deleted topic's partitions get none, as in Kafka);
3. write ``Complete{Commit,Abort}``.

A crash before 1 leaves the transaction ``Ongoing``: it expires and is aborted. A crash
after 1 leaves ``Prepare*`` in the log: loading the partition finishes steps 2 and 3 (a
second marker for a producer with no open transaction changes nothing).

Who writes what: the coordinator of an id is this broker when embedded, and in cluster
mode the leader of the id's ``__transaction_state`` partition (it took the partition over
at its leader epoch, which is the *coordinator epoch* the markers carry). It writes the
markers of the partitions it leads itself and sends ``WriteTxnMarkers`` to the leaders of
the others. A marker carries the producer epoch; a partition refuses one below the
producer's epoch there. Requests of one id are serialised (an ``asyncio.Lock`` per id), so
``Prepare*`` is never seen by a client: a concurrent request waits for the end instead of
getting CONCURRENT_TRANSACTIONS.

Fencing: ``InitProducerId`` bumps the epoch (a new id gets a new producer id at epoch 0);
a request with an older epoch gets PRODUCER_FENCED. A producer may ask for its own bump
with its current id and epoch (KIP-360); its retry with the epoch it held before is answered
with the current epoch (``last_epoch``), which another producer's InitProducerId or a fence
clears, so the producer fenced cannot bump its way back. An open transaction is aborted at the
bumped epoch first, so that a zombie's batches are refused by every partition it wrote to.
An expired transaction is aborted the same way (Kafka's ``transaction.timeout.ms``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from sparklog.broker.coordinators.group_offsets import OFFSETS_TOPIC, OffsetStore
from sparklog.broker.partitions import PartitionManager
from sparklog.errors import (
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    SparkLogError,
    TransactionalIdNotFoundError,
    UnknownTopicError,
)

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
TXN_PARTITIONS = 8
MAX_EPOCH = 32767 - 1

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)

Partition = tuple[str, int]
#: writes one marker: (topic, partition, producer id, epoch, commit, coordinator epoch)
MarkerWriter = Callable[[str, int, int, int, bool, int], Awaitable[None]]


def txn_partition(transactional_id: str) -> int:
    """The ``__transaction_state`` partition of a transactional id."""
    return zlib.crc32(transactional_id.encode()) % TXN_PARTITIONS


@dataclass(frozen=True)
class TxnMeta:
    """One transactional id's state (see the module docstring)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: frozenset[Partition] = field(default_factory=frozenset)
    start_ms: int = -1
    update_ms: int = 0
    #: the epoch a producer held before it bumped its own (KIP-360), so that its retry is
    #: answered with the current epoch; -1 once another producer or a fence bumped it
    last_epoch: int = -1

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "timeout_ms": self.timeout_ms,
                "state": self.state,
                "partitions": sorted([t, p] for t, p in self.partitions),
                "start_ms": self.start_ms,
                "update_ms": self.update_ms,
                "last_epoch": self.last_epoch,
            }
        ).encode()

    @classmethod
    def from_json(cls, transactional_id: str, data: bytes) -> TxnMeta:
        d = json.loads(data)
        return cls(
            transactional_id,
            int(d["producer_id"]),
            int(d["producer_epoch"]),
            int(d["timeout_ms"]),
            str(d["state"]),
            frozenset((str(t), int(p)) for t, p in d["partitions"]),
            int(d["start_ms"]),
            int(d["update_ms"]),
            int(d.get("last_epoch", -1)),
        )


def _is_retry(meta: TxnMeta, producer_id: int, producer_epoch: int) -> bool:
    """InitProducerId from the producer that bumped its own epoch, with the epoch it held
    before: a retry whose answer was lost (Kafka's ``prepareIncrementProducerEpoch``), to be
    answered with the current epoch, unless a transaction began since."""
    return (
        producer_id == meta.producer_id
        and 0 <= meta.last_epoch == producer_epoch != meta.producer_epoch
        and meta.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
    )


def _key(transactional_id: str) -> bytes:
    return json.dumps(["txn", transactional_id]).encode()


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """Transactional ids of the ``__transaction_state`` partitions this broker leads."""

    def __init__(
        self,
        manager: PartitionManager,
        offsets: OffsetStore,
        *,
        next_producer_id: Callable[[], Awaitable[int]],
        max_timeout_ms: int,
        abort_check_ms: int,
        remote_marker: MarkerWriter | None = None,
    ) -> None:
        self.manager = manager
        self.offsets = offsets
        self.next_producer_id = next_producer_id
        self.max_timeout_ms = max_timeout_ms
        self.abort_check_ms = abort_check_ms
        #: cluster mode: writes a marker to a partition another broker leads
        self.remote_marker = remote_marker
        self.txns: dict[str, TxnMeta] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle

    def ensure_topic(self) -> int:
        """Create ``__transaction_state`` if missing; its partition count."""
        return self.manager.ensure_internal_topic(TXN_TOPIC, TXN_PARTITIONS)

    def load(self) -> None:
        """Embedded mode: replay every partition of ``__transaction_state``."""
        for p in range(self.ensure_topic()):
            self.load_partition(p)

    def load_partition(self, partition: int) -> None:
        """Replay one partition (cluster mode: when this broker takes it over) and finish
        the transactions a crash left between ``Prepare*`` and ``Complete*``."""
        self.drop_partition(partition)
        plog = self.manager.partition(TXN_TOPIC, partition).log
        if plog.high_watermark > plog.log_start_offset:
            for batch in plog.batches(plog.log_start_offset, columns=["offset", "key", "value"]):
                for key, value in zip(
                    batch.column("key").to_pylist(),
                    batch.column("value").to_pylist(),
                    strict=True,
                ):
                    self._apply(key, value)
        for meta in list(self.txns.values()):
            if txn_partition(meta.transactional_id) == partition and meta.state in (
                PREPARE_COMMIT,
                PREPARE_ABORT,
            ):
                self._spawn(self._finish_later(meta.transactional_id))

    def drop_partition(self, partition: int) -> None:
        for tid in [t for t in self.txns if txn_partition(t) == partition]:
            del self.txns[tid]

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        try:
            kind, tid = json.loads(key) if key is not None else (None, None)
        except (ValueError, TypeError):
            return
        if kind != "txn" or not isinstance(tid, str):
            return
        if value is None:
            self.txns.pop(tid, None)
            return
        try:
            self.txns[tid] = TxnMeta.from_json(tid, value)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("transaction state of %r unreadable, skipped: %s", tid, e)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expire_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._background) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # no running loop: nothing can be finished now
            coro.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------ durable state

    def coordinates(self, transactional_id: str) -> bool:
        """Embedded: always. Cluster mode: this broker leads the id's partition."""
        return (TXN_TOPIC, txn_partition(transactional_id)) in self.manager.handles or (
            not self.manager.cluster
        )

    def coordinator_epoch(self, transactional_id: str) -> int:
        handle = self.manager.handles.get((TXN_TOPIC, txn_partition(transactional_id)))
        return max(handle.log.manifest.leader_epoch, 0) if handle is not None else 0

    async def _persist(self, meta: TxnMeta, *, durable: bool = True) -> TxnMeta:
        """Append ``meta``'s record; with ``durable``, return once it is fsynced."""
        meta = replace(meta, update_ms=_now_ms())
        handle = self.manager.partition(TXN_TOPIC, txn_partition(meta.transactional_id))
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([_key(meta.transactional_id)], pa.binary()),
                pa.array([meta.to_json()], pa.binary()),
            ],
            names=["key", "value"],
        )
        result = handle.log.append(batch, durable=False)
        if durable:
            await self.manager.wait_durable(handle, result.last_offset + 1)
        self.txns[meta.transactional_id] = meta
        return meta

    # ------------------------------------------------------------------ the requests

    def _current(self, tid: str, producer_id: int, epoch: int) -> TxnMeta:
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {tid!r} does not hold producer id {producer_id}"
            )
        if epoch != meta.producer_epoch:
            raise ProducerFencedError(
                f"transactional id {tid!r}: epoch {epoch} is fenced by epoch {meta.producer_epoch}"
            )
        return meta

    async def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """(producer id, epoch) for ``tid``: a new one, or the held one at the next epoch,
        with any open transaction aborted first (see the module docstring)."""
        if not tid:
            raise ValueError("an empty transactional id")
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms is outside (0, {self.max_timeout_ms}] "
                "(transaction_max_timeout_ms)"
            )
        async with self._lock(tid):
            meta = self.txns.get(tid)
            own = meta is not None and producer_id >= 0
            if own and meta is not None and _is_retry(meta, producer_id, producer_epoch):
                return meta.producer_id, meta.producer_epoch
            if (
                own
                and meta is not None
                and (producer_id != meta.producer_id or producer_epoch != meta.producer_epoch)
            ):  # KIP-360: only the current producer may ask for its own epoch bump
                raise ProducerFencedError(
                    f"transactional id {tid!r} is held by producer {meta.producer_id} epoch "
                    f"{meta.producer_epoch}, not {producer_id} epoch {producer_epoch}"
                )
            if meta is None:
                meta = TxnMeta(tid, await self.next_producer_id(), 0, timeout_ms)
            else:
                if meta.state == ONGOING:
                    meta = await self._end(meta, commit=False, bump=True)
                elif meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    meta = await self._finish(meta)
                if meta.producer_epoch >= MAX_EPOCH:
                    meta = TxnMeta(tid, await self.next_producer_id(), 0, timeout_ms)
                else:
                    last = producer_epoch if own else -1  # a new producer clears it
                    meta = replace(meta, producer_epoch=meta.producer_epoch + 1, last_epoch=last)
            meta = replace(
                meta, timeout_ms=timeout_ms, state=EMPTY, partitions=frozenset(), start_ms=-1
            )
            meta = await self._persist(meta)
            log.info(
                "transactional id %r: producer %d epoch %d",
                tid,
                meta.producer_id,
                meta.producer_epoch,
            )
            return meta.producer_id, meta.producer_epoch

    def check_partitions(self, partitions: Iterable[Partition]) -> dict[Partition, SparkLogError]:
        """Partitions that do not exist, with why."""
        errors: dict[Partition, SparkLogError] = {}
        for t, p in partitions:
            try:
                meta = self.manager.topic(t)
            except (UnknownTopicError, ValueError):
                errors[(t, p)] = UnknownTopicError(f"topic {t!r} does not exist")
                continue
            if not 0 <= p < meta.partitions:
                errors[(t, p)] = UnknownTopicError(f"{t} has no partition {p}")
        return errors

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[Partition]
    ) -> None:
        """Add partitions to the producer's transaction, which begins if none is open."""
        new = frozenset(partitions)
        async with self._lock(tid):
            meta = await self._settled(self._current(tid, producer_id, epoch))
            if meta.state == ONGOING and new <= meta.partitions:
                return
            if meta.state != ONGOING:
                meta = replace(meta, state=ONGOING, partitions=frozenset(), start_ms=_now_ms())
            await self._persist(replace(meta, partitions=meta.partitions | new))

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort the producer's open transaction, answered once the outcome
        is durable (``Prepare*``, step 1); the markers and ``Complete*`` (steps 2 and 3)
        follow in the background, as in Kafka, and the id's next request waits for them. A
        retry of the transaction that just ended is answered again; anything else out of
        order is INVALID_TXN_STATE."""
        async with self._lock(tid):
            meta = self._current(tid, producer_id, epoch)
            if meta.state == ONGOING:
                prepared = replace(meta, state=PREPARE_COMMIT if commit else PREPARE_ABORT)
                await self._persist(prepared)
                self._spawn(self._finish_later(tid))
                return
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            if meta.state in (done, PREPARE_COMMIT if commit else PREPARE_ABORT):
                return
            raise InvalidTxnStateError(
                f"transactional id {tid!r} cannot {'commit' if commit else 'abort'}: its "
                f"state is {meta.state}"
            )

    # ------------------------------------------------------------------ ending

    async def _end(self, meta: TxnMeta, *, commit: bool, bump: bool) -> TxnMeta:
        """Steps 1-3 of the module docstring; ``bump``: abort at the next epoch (fencing)."""
        epoch = meta.producer_epoch + 1 if bump else meta.producer_epoch
        prepared = replace(
            meta,
            producer_epoch=epoch,
            last_epoch=-1 if bump else meta.last_epoch,  # a fence leaves nothing to retry
            state=PREPARE_COMMIT if commit else PREPARE_ABORT,
        )
        prepared = await self._persist(prepared)
        return await self._finish(prepared)

    async def _settled(self, meta: TxnMeta) -> TxnMeta:
        """``meta`` with a decided transaction finished first (steps 2 and 3)."""
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return await self._finish(meta)
        return meta

    async def _finish(self, meta: TxnMeta) -> TxnMeta:
        commit = meta.state == PREPARE_COMMIT
        coordinator_epoch = self.coordinator_epoch(meta.transactional_id)
        # a deleted topic's partitions get no marker (as in Kafka): waiting for them would
        # leave the id in Prepare* for good, and fail its every later request
        gone = self.check_partitions(meta.partitions)
        if gone:
            log.info(
                "transactional id %r: no markers for deleted partitions %s",
                meta.transactional_id,
                sorted(gone),
            )
        await asyncio.gather(
            *(
                self.write_marker(
                    t, p, meta.producer_id, meta.producer_epoch, commit, coordinator_epoch
                )
                for t, p in sorted(meta.partitions - gone.keys())
            )
        )
        done = replace(meta, state=COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        log.info(
            "transactional id %r: %s (%d partitions)",
            meta.transactional_id,
            done.state,
            len(meta.partitions),
        )
        # not awaited: lost in a crash, the Prepare* record before it finishes the markers
        # again (they change nothing twice); the id's next durable record syncs it anyway
        return await self._persist(done, durable=False)

    async def _finish_later(self, tid: str) -> None:
        """Steps 2 and 3 for ``tid`` if still to do; a failure (a partition's leader not
        reachable) leaves ``Prepare*``, which the expiry loop and the id's next request
        take up again."""
        async with self._lock(tid):
            meta = self.txns.get(tid)
            if meta is not None and meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                try:
                    await self._finish(meta)
                except (SparkLogError, OSError) as e:
                    log.warning("transactional id %r: %s not completed yet: %s", tid, meta.state, e)

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> None:
        """One marker, written here when this broker leads the partition, else by its
        leader (``remote_marker``)."""
        if self.manager.cluster and (topic, partition) not in self.manager.handles:
            if self.remote_marker is None:
                raise InvalidTxnStateError(f"no way to reach the leader of {topic}-{partition}")
            await self.remote_marker(
                topic, partition, producer_id, epoch, commit, coordinator_epoch
            )
            return
        await write_local_marker(
            self.manager,
            self.offsets,
            topic,
            partition,
            producer_id,
            epoch,
            commit,
            coordinator_epoch,
        )

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.abort_check_ms / 1000)
            now = _now_ms()
            for meta in list(self.txns.values()):
                if meta.state == ONGOING and now - meta.start_ms > meta.timeout_ms:
                    with contextlib.suppress(SparkLogError):
                        await self._expire(meta.transactional_id)
                elif meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and (
                    now - meta.update_ms > 5 * self.abort_check_ms
                ):  # a completion that failed (or a coordinator that just took over)
                    await self._finish_later(meta.transactional_id)

    async def _expire(self, tid: str) -> None:
        async with self._lock(tid):
            meta = self.txns.get(tid)
            if meta is None or meta.state != ONGOING:
                return
            if _now_ms() - meta.start_ms <= meta.timeout_ms or not self.coordinates(tid):
                return
            log.info(
                "transactional id %r: transaction expired after %d ms: aborted",
                tid,
                meta.timeout_ms,
            )
            await self._end(meta, commit=False, bump=True)

    # ------------------------------------------------------------------ describe

    def describe(self, tid: str) -> TxnMeta:
        meta = self.txns.get(tid)
        if meta is None:
            raise TransactionalIdNotFoundError(f"no transactional id {tid!r}")
        return meta

    def check_epoch(self, tid: str, producer_id: int, epoch: int) -> None:
        """Where this broker coordinates ``tid``: ProducerFencedError if ``epoch`` is not the
        id's current one (TxnOffsetCommit from a zombie must not join its successor's
        transaction). Elsewhere, or for an id this coordinator does not know, nothing."""
        if self.coordinates(tid) and tid in self.txns:
            self._current(tid, producer_id, epoch)

    def verify(self, tid: str, producer_id: int, epoch: int, partition: Partition) -> None:
        """KIP-890's check of a transactional produce, where this broker coordinates the
        id: the producer holds it at this epoch and added the partition to its open
        transaction. Refuses a zombie's batch to a partition its successor never touched,
        whose open transaction would otherwise hold the last stable offset back."""
        if not self.coordinates(tid) or tid not in self.txns:
            return
        meta = self._current(tid, producer_id, epoch)
        if meta.state != ONGOING or partition not in meta.partitions:
            raise InvalidTxnStateError(
                f"transactional id {tid!r} has not added {partition[0]}-{partition[1]} to an "
                "open transaction"
            )


async def write_local_marker(
    manager: PartitionManager,
    offsets: OffsetStore,
    topic: str,
    partition: int,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
) -> None:
    """Write one marker to a partition this broker leads, durably; on ``__consumer_offsets``
    the transaction's offsets become visible (commit) or are dropped (abort)."""
    handle = manager.partition(topic, partition)
    result = handle.log.append_marker(
        producer_id, epoch, commit=commit, coordinator_epoch=coordinator_epoch, durable=False
    )
    await manager.wait_durable(handle, result.last_offset + 1)
    if topic == OFFSETS_TOPIC:
        offsets.complete_txn(partition, producer_id, commit)
    manager.notify(handle)


def describe_entry(meta: TxnMeta) -> dict[str, Any]:
    """DescribeTransactions' view of one id."""
    topics: dict[str, list[int]] = {}
    for t, p in sorted(meta.partitions):
        topics.setdefault(t, []).append(p)
    return {
        "transactional_id": meta.transactional_id,
        "transaction_state": meta.state,
        "transaction_timeout": meta.timeout_ms,
        "transaction_start_time": meta.start_ms if meta.state == ONGOING else -1,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }
