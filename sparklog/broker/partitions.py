"""The broker's view of its partitions: open logs, idempotence state, durability, waiters.

Everything here runs on the broker's event loop thread, except fsyncs, which run on a small
thread pool so that appends (and other partitions) go on meanwhile. Group commit: produce
requests waiting on the same partition share one fsync (``wait_durable``): while an fsync
is running, newcomers queue; the next fsync covers all of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sparklog.broker.batches import DecodedBatch
from sparklog.broker.config import BrokerConfig
from sparklog.broker.producers import ProducerIdAllocator, ProducerStates
from sparklog.errors import CorruptMetadataError, UnknownTopicError
from sparklog.storage import Storage, names
from sparklog.storage.log import PartitionLog
from sparklog.storage.topics import TopicMeta

log = logging.getLogger(__name__)


@dataclass
class AppendOutcome:
    base_offset: int
    log_append_time_ms: int
    duplicate: bool = False


@dataclass
class PartitionHandle:
    """One open partition."""

    topic: str
    partition: int
    log: PartitionLog
    leader_epoch: int
    producers: ProducerStates
    active_base: int = 0
    pending: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    syncing: bool = False
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.topic}-{self.partition}"


class PartitionManager:
    """Topics and open partition logs of one broker; the single writer of its data dir."""

    def __init__(self, config: BrokerConfig, storage: Storage) -> None:
        self.config = config
        self.storage = storage
        self.handles: dict[tuple[str, int], PartitionHandle] = {}
        self._topics: dict[str, TopicMeta] = {}
        self.producer_ids = ProducerIdAllocator(storage.fs, storage.root)
        self._sync_pool = ThreadPoolExecutor(4, thread_name_prefix="sparklog-fsync")
        for name in storage.topics.list():
            self._topics[name] = storage.topics.get(name)

    # ------------------------------------------------------------------ topics

    def topics(self) -> dict[str, TopicMeta]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicMeta:
        names.validate_topic_name(name)
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return meta

    def create_topic(
        self, name: str, partitions: int | None, configs: dict[str, str] | None
    ) -> TopicMeta:
        merged = {**self.config.topic_defaults, **(configs or {})}
        meta = self.storage.topics.create(
            name,
            partitions if partitions and partitions > 0 else self.config.num_partitions,
            merged,
        )
        self._topics[name] = meta
        return meta

    def auto_create(self, name: str) -> TopicMeta:
        """The topic, created with the broker defaults if missing and auto creation is on."""
        try:
            return self.topic(name)
        except UnknownTopicError:
            if not self.config.auto_create_topics:
                raise
            log.info("auto-creating topic %s", name)
            return self.create_topic(name, None, None)

    def delete_topic(self, name: str) -> None:
        meta = self.topic(name)
        for p in range(meta.partitions):
            handle = self.handles.pop((name, p), None)
            if handle is not None:
                self._fail_waiters(handle, UnknownTopicError(f"topic {name!r} was deleted"))
                handle.log.close()
        self.storage.topics.delete(name)
        del self._topics[name]

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.storage.topics.add_partitions(name, total)
        self._topics[name] = meta
        return meta

    # ------------------------------------------------------------------ partitions

    def partition(self, topic: str, partition: int) -> PartitionHandle:
        handle = self.handles.get((topic, partition))
        if handle is not None:
            return handle
        meta = self.storage.topics.check_partition(topic, partition)
        plog = PartitionLog.open(
            self.storage.fs,
            self.storage.root,
            topic,
            partition,
            meta.config,
            writer=f"broker:{self.config.node_id}",
        )
        epoch = plog.bump_leader_epoch()
        handle = PartitionHandle(
            topic,
            partition,
            plog,
            epoch,
            self._load_producers(plog),
            active_base=plog.manifest.active.base_offset,
        )
        self.handles[(topic, partition)] = handle
        return handle

    def _load_producers(self, plog: PartitionLog) -> ProducerStates:
        path = plog.fs.join(plog.path, names.PRODUCER_STATE_FILE)
        states = ProducerStates()
        try:
            states = ProducerStates.from_json(plog.fs.read_bytes(path), path)
        except FileNotFoundError:
            pass
        except CorruptMetadataError as e:
            log.warning("%s; rebuilding producer state from the log", e)
            states = ProducerStates()
        start = max(states.covered_offset, plog.log_start_offset)
        if start < plog.high_watermark:
            states.replay(list(plog.batches(start)))
        return states

    def _snapshot_producers(self, handle: PartitionHandle) -> None:
        path = handle.log.fs.join(handle.log.path, names.PRODUCER_STATE_FILE)
        handle.log.fs.write_atomic(path, handle.producers.to_json())

    def append(self, handle: PartitionHandle, batch: DecodedBatch) -> AppendOutcome:
        """Append one decoded produce batch (not yet durable). Runs on the loop thread, so
        the idempotence check and the append are one atomic step."""
        if batch.producer_id >= 0:
            dup = handle.producers.check(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.count,
                handle.label,
            )
            if dup is not None:
                return AppendOutcome(dup.first_offset, -1, duplicate=True)
        result = handle.log.append(batch.records, durable=False)
        if batch.producer_id >= 0:
            handle.producers.update(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.count,
                result.base_offset,
            )
        else:
            handle.producers.covered_offset = result.last_offset + 1
        active = handle.log.manifest.active.base_offset
        if active != handle.active_base:  # rolled: snapshot, so replay after a crash is short
            handle.active_base = active
            self._snapshot_producers(handle)
        return AppendOutcome(result.base_offset, result.log_append_time_ms)

    async def wait_durable(self, handle: PartitionHandle, next_offset: int) -> None:
        if handle.log.high_watermark >= next_offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handle.pending.append((next_offset, fut))
        if not handle.syncing:
            handle.syncing = True
            asyncio.get_running_loop().create_task(self._sync_loop(handle))
        await fut

    async def _sync_loop(self, handle: PartitionHandle) -> None:
        loop = asyncio.get_running_loop()
        try:
            while handle.pending:
                await loop.run_in_executor(self._sync_pool, handle.log.sync)
                hw = handle.log.high_watermark
                still = []
                for off, fut in handle.pending:
                    if off <= hw:
                        if not fut.done():
                            fut.set_result(None)
                    else:
                        still.append((off, fut))
                handle.pending = still
                self.notify(handle)
        except Exception as e:
            log.exception("%s: fsync failed", handle.label)
            for _, fut in handle.pending:
                if not fut.done():
                    fut.set_exception(e)
            handle.pending = []
        finally:
            handle.syncing = False

    # ------------------------------------------------------------------ fetch waiters

    def notify(self, handle: PartitionHandle) -> None:
        waiters, handle.waiters = handle.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, handle: PartitionHandle, exc: Exception) -> None:
        for _, fut in handle.pending:
            if not fut.done():
                fut.set_exception(exc)
        self.notify(handle)

    async def wait_for_data(self, handles: Iterable[PartitionHandle], timeout_s: float) -> None:
        """Return when any of ``handles`` gets new visible records, or after ``timeout_s``."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        hs = list(handles)
        for h in hs:
            h.waiters.append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            pass
        finally:
            for h in hs:
                if fut in h.waiters:
                    h.waiters.remove(fut)

    # ------------------------------------------------------------------ maintenance

    def maintain(self, handles: Iterable[PartitionHandle], *, collect_garbage: bool) -> None:
        """Pick up manifest versions other writers committed (retention and compaction jobs
        commit without calling the broker), then, if asked, delete files that no manifest
        needs any more (after ``file.delete.delay.ms``). Runs on a worker thread; a failure
        on one partition is logged and the others go on."""
        for handle in handles:
            try:
                before = handle.log.manifest
                after = handle.log.refresh()
                if after.version != before.version:
                    log.info(
                        "%s: manifest version %d by %s (log start %d -> %d, %d segments)",
                        handle.label, after.version, after.writer or "?",
                        before.log_start_offset, after.log_start_offset, len(after.segments),
                    )  # fmt: skip
                if collect_garbage:
                    deleted = handle.log.collect_garbage().deleted
                    if deleted:
                        log.info("%s: deleted %d unreferenced files", handle.label, len(deleted))
            except Exception as e:
                if (handle.topic, handle.partition) in self.handles:
                    log.warning("%s: manifest refresh or garbage collection failed: %s",
                                handle.label, e)  # fmt: skip

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        for handle in self.handles.values():
            try:
                handle.log.sync()
                handle.producers.covered_offset = handle.log.log_end_offset
                self._snapshot_producers(handle)
                handle.log.close()
            except Exception:
                log.exception("%s: close failed", handle.label)
        self.handles.clear()
        self._sync_pool.shutdown(wait=True)
