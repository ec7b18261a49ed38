"""The broker's view of its partitions: open logs, their leader epochs, fetch waiters.

Everything here runs on the broker's event loop thread. Durability is the log's own
(``PartitionLog``'s group commit, on storage's threads): ``wait_durable`` awaits it, and the
log tells the broker when its high watermark moves, which wakes fetch long-polls. So is
idempotence: an idempotent producer's batch is checked and appended in one step by the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sparklog.broker.config import BrokerConfig
from sparklog.broker.coordinators.producer_ids import ProducerIdAllocator
from sparklog.broker.gate import TakeOverGate
from sparklog.broker.wire_cache import CachedBatches, WireCache
from sparklog.errors import (
    FencedLeaderEpochError,
    ForeignWriterError,
    NotLeaderError,
    SparkLogError,
    TopicExistsError,
    UnknownLeaderEpochError,
    UnknownTopicError,
)
from sparklog.kafka.records import DecodedBatch
from sparklog.storage import Storage, names
from sparklog.storage.fs import FileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.reader import LogView, PartitionReader
from sparklog.storage.records import AppendResult
from sparklog.storage.tail import BrokerTail, tail_key
from sparklog.storage.topics import TopicMeta

log = logging.getLogger(__name__)


@dataclass
class PartitionHandle:
    """One open partition."""

    topic: str
    partition: int
    log: PartitionLog
    leader_epoch: int
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    #: its recent produced batches (``sparklog.broker.wire_cache``): this handle's only
    wire: CachedBatches = field(default_factory=CachedBatches, repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.topic}-{self.partition}"


class PartitionManager:
    """Topics and open partition logs of one broker; the single writer of its data dir."""

    def __init__(self, config: BrokerConfig, storage: Storage, *, cluster: bool = False) -> None:
        self.config = config
        self.storage = storage
        #: cluster mode: partitions are opened only when the controller assigns them to
        #: this broker (``open_led``/``install``, by ``sparklog.broker.membership``)
        self.cluster = cluster
        self._readers: dict[tuple[str, int], PartitionReader] = {}
        self.handles: dict[tuple[str, int], PartitionHandle] = {}
        self._topics: dict[str, TopicMeta] = {}
        #: set once another writer was found on this broker's storage (``stop_writes``)
        self.foreign: ForeignWriterError | None = None
        self.producer_ids = ProducerIdAllocator(storage.fs, storage.root)
        #: the filesystem partition logs open on, and the broker's tail: on object storage
        #: (``sparklog.broker.object_storage``) the tiered one and the tail, set by the broker
        self.log_fs: FileSystem = storage.fs
        self.tail: BrokerTail | None = None
        #: produced batches fetches are served as they came (``sparklog.broker.wire_cache``)
        self.wire = WireCache(config.fetch_cache_bytes)
        #: cluster mode: the gates of partitions this broker is taking over right now, or
        #: whose waiting produce requests are still passing (``sparklog.broker.gate``)
        self.taking: dict[tuple[str, int], TakeOverGate] = {}
        #: object storage: (manifest version, when to collect again) per partition
        self._gc_seen: dict[tuple[str, int], tuple[int, float]] = {}
        for name in storage.topics.list():
            self._topics[name] = storage.topics.get(name)

    # ------------------------------------------------------------------ topics

    def topics(self) -> dict[str, TopicMeta]:
        """Every topic, those created in the data dir by another process (``sparklog topics
        create --data-dir``) since this broker started included."""
        for name in self.storage.topics.list():
            if name not in self._topics:
                self._adopt(name)
        return dict(self._topics)

    def sync_topics(self) -> list[tuple[str, int]]:
        """Cluster mode: pick up topic changes another broker committed to the shared
        storage (and changes of the dynamic topic defaults: any broker's, embedded this
        one's): new configs reach the open logs of the topic; the partitions of a topic
        deleted, or deleted and created again (another topic id), are returned, for the
        caller to give up. Each known topic costs one read of its latest metadata version.
        ``read_topics`` (blocking: a worker thread) then ``apply_topics`` (the event loop)
        are the same in two steps."""
        return self.apply_topics(self.read_topics())

    def read_topics(self) -> dict[str, tuple[TopicMeta, TopicMeta | None]]:
        """Per topic this broker knows: what it knew, and the latest metadata (None:
        deleted)."""
        found: dict[str, tuple[TopicMeta, TopicMeta | None]] = {}
        for name, known in list(self._topics.items()):
            try:
                found[name] = (known, self.storage.topics.get(name))
            except UnknownTopicError:
                found[name] = (known, None)
        return found

    def apply_topics(
        self, found: dict[str, tuple[TopicMeta, TopicMeta | None]]
    ) -> list[tuple[str, int]]:
        """Apply what ``read_topics`` found (see ``sync_topics``); a topic this broker
        changed meanwhile (created again, deleted) is left to the next read."""
        gone: list[tuple[str, int]] = []
        for name, (known, meta) in found.items():
            if self._topics.get(name) is not known:
                continue
            if meta is None or meta.topic_id != known.topic_id:  # gone, or created again
                del self._topics[name]
                self._forget_readers(name)
                gone += [k for k in self.handles if k[0] == name]
                continue
            if meta.version != known.version or meta.config != known.config:
                self._topics[name] = meta
                for (topic, _p), handle in self.handles.items():
                    if topic == name:
                        handle.log.reconfigure(meta.config)
        return gone

    def topic(self, name: str) -> TopicMeta:
        names.validate_topic_name(name)
        meta = self._topics.get(name)
        if meta is None:
            meta = self._adopt(name)
        if meta is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return meta

    def _adopt(self, name: str) -> TopicMeta | None:
        """A topic another process created in the data dir, now known to this broker."""
        try:
            meta = self.storage.topics.get(name)
        except UnknownTopicError:
            return None
        log.info("topic %s was created in the data dir by another process", name)
        self._topics[name] = meta
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

    def ensure_internal_topic(self, name: str, partitions: int) -> int:
        """Create an internal compacted topic (``__consumer_offsets``,
        ``__transaction_state``) if missing; its partition count."""
        try:
            meta = self.topic(name)
        except UnknownTopicError:
            try:
                meta = self.create_topic(
                    name,
                    partitions,
                    {"cleanup.policy": "compact", "segment.bytes": str(64 * 1024 * 1024)},
                )
            except TopicExistsError:  # another broker of the cluster created it first
                meta = self.topic(name)
        return meta.partitions

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
        self.topic(name)
        meta = self.storage.topics.get(name)  # fresh: its id is the one to forget
        for p in range(meta.partitions):
            handle = self.handles.pop((name, p), None)
            if handle is not None:
                self.notify(handle)
                handle.log.close()
        self._forget_readers(name)
        self.storage.topics.delete(name)
        del self._topics[name]
        if self.tail is not None:
            try:
                self.tail.store.forget(tail_key(name, meta.topic_id))
            except SparkLogError as e:  # object_storage.forget_deleted_topics sweeps it
                log.warning("%s: its tail is not forgotten yet: %s", name, e)

    def _forget_readers(self, topic: str) -> None:
        """Drop the follower readers of a deleted topic (their open sealed segments would
        keep descriptors on deleted files)."""
        for key in [k for k in self._readers if k[0] == topic]:
            del self._readers[key]

    def alter_configs(
        self,
        name: str,
        configs: dict[str, str],
        delete: list[str],
        *,
        replace: bool,
        validate_only: bool,
    ) -> TopicMeta:
        """Change a topic's configs; a deleted or (``replace``) unnamed config returns to
        the broker's topic default if it has one, else to Kafka's. Open partitions use the
        new configs from their next append."""
        self.topic(name)
        defaults = self.config.topic_defaults
        if replace:
            configs = {**defaults, **configs}
        back = {k: defaults[k] for k in delete if k in defaults}
        meta = self.storage.topics.alter_configs(
            name,
            {**configs, **back},
            [k for k in delete if k not in defaults],
            replace=replace,
            validate_only=validate_only,
        )
        if not validate_only:
            self._topics[name] = meta
            for (topic, _p), handle in self.handles.items():
                if topic == name:
                    handle.log.reconfigure(meta.config)
        return meta

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.storage.topics.add_partitions(name, total)
        self._topics[name] = meta
        return meta

    # ------------------------------------------------------------------ partitions

    def led(self, topic: str, partition: int, current_leader_epoch: int = -1) -> PartitionHandle:
        """``partition``, with KIP-320's check of the epoch the client believes current
        (cluster mode; -1 skips it): older than this leader's is FENCED_LEADER_EPOCH (the
        client's metadata is stale), newer is UNKNOWN_LEADER_EPOCH (this broker's is)."""
        handle = self.partition(topic, partition)
        if self.cluster and current_leader_epoch >= 0:
            if current_leader_epoch < handle.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{handle.label}: leader epoch {current_leader_epoch} is older than the "
                    f"current {handle.leader_epoch}"
                )
            if current_leader_epoch > handle.leader_epoch:
                raise UnknownLeaderEpochError(
                    f"{handle.label}: leader epoch {current_leader_epoch} is newer than this "
                    f"leader's {handle.leader_epoch}"
                )
        return handle

    def partition(self, topic: str, partition: int) -> PartitionHandle:
        handle = self.handles.get((topic, partition))
        if handle is not None:
            return handle
        meta = self.storage.topics.check_partition(topic, partition)
        if self.cluster:
            raise NotLeaderError(
                f"{topic}-{partition}: broker {self.config.node_id} does not lead it"
            )
        plog = self._open_log(topic, partition, meta)
        try:
            epoch = plog.bump_leader_epoch()
        except BaseException:
            plog.close()
            raise
        return self.install(topic, partition, plog, epoch)

    def _open_log(
        self,
        topic: str,
        partition: int,
        meta: TopicMeta,
        leader_epoch: int | None = None,
        fence: Callable[[], None] | None = None,
    ) -> PartitionLog:
        if self.foreign is not None:  # opening would commit an epoch over the other writer
            raise self.foreign
        if self.tail is not None:  # the tail of this topic, not of one of the same name
            self.tail.name_topic(topic, meta.topic_id)
        return PartitionLog.open(
            self.log_fs,
            self.storage.root,
            topic,
            partition,
            meta.config,
            writer=f"broker:{self.config.node_id}",
            leader_epoch=leader_epoch,
            fence=fence,
            tail=self.tail,
        )

    def follower_view(self, topic: str, partition: int) -> LogView:
        """Cluster mode: a partition this broker does not lead, read from storage as any
        reader does (the manifest, then its epoch's high-watermark checkpoint)."""
        self.storage.topics.check_partition(topic, partition)
        reader = self._readers.get((topic, partition))
        if reader is None:
            reader = PartitionReader(self.storage.fs, self.storage.root, topic, partition)
            self._readers[(topic, partition)] = reader
        return reader.view()

    def open_led(
        self, topic: str, partition: int, epoch: int, fence: Callable[[], None] | None
    ) -> PartitionLog:
        """Cluster mode: take ``topic-partition`` over at leader ``epoch`` (blocking: run it
        on a worker thread); ``install`` it on the event loop."""
        meta = self.storage.topics.check_partition(topic, partition)
        return self._open_log(topic, partition, meta, epoch, fence)

    def taking_over(self, topic: str, partition: int) -> None:
        """Cluster mode: a take-over of ``topic-partition`` started (Metadata may already
        name this broker its leader); produce requests for it wait for ``taken_over``."""
        gate = self.taking.get((topic, partition))
        if gate is None:
            self.taking[(topic, partition)] = TakeOverGate()
        else:
            gate.close()

    def taken_over(self, topic: str, partition: int) -> None:
        """The take-over ended (installed, or failed): the requests waiting go on, one
        after another in the order they came."""
        gate = self.taking.get((topic, partition))
        if gate is not None:
            gate.open()
            if gate.idle:
                del self.taking[(topic, partition)]

    def passed(self, entered: list[tuple[tuple[str, int], TakeOverGate]]) -> None:
        """The requests that ``until_taken_over`` let through appended: the next go on."""
        for key, gate in entered:
            gate.leave()
            if gate.idle and self.taking.get(key) is gate:
                del self.taking[key]

    async def until_taken_over(
        self, keys: Iterable[tuple[str, int]], timeout_s: float
    ) -> list[tuple[tuple[str, int], TakeOverGate]]:
        """Wait (at most ``timeout_s``) for the take-overs of ``keys`` in progress, and for
        the requests that came before (``sparklog.broker.gate``); the gates entered, to be
        left with ``passed`` once the batches are appended.

        A produce request that reaches a new leader before its take-over ends would be
        answered NOT_LEADER_OR_FOLLOWER, which clients take as "not written": an idempotent
        producer whose pipelined batches get that answer while a later one reaches the
        finished leader sees OUT_OF_ORDER_SEQUENCE_NUMBER, bumps its epoch and sends the
        earlier batches again as new records - duplicates of records the old leader had
        committed. Waiting keeps the batches in order, as Kafka's short leader transition
        does. Gates are entered in key order, so two requests never wait for each other."""
        entered: list[tuple[tuple[str, int], TakeOverGate]] = []
        try:
            async with asyncio.timeout(timeout_s):
                for key in sorted(keys):
                    gate = self.taking.get(key)
                    if gate is not None:
                        await gate.enter()
                        entered.append((key, gate))
        except TimeoutError:
            pass  # goes on without the gates it did not get (answered NOT_LEADER if still taken)
        return entered

    def install(
        self, topic: str, partition: int, plog: PartitionLog, epoch: int
    ) -> PartitionHandle:
        handle = PartitionHandle(topic, partition, plog, epoch)
        loop = asyncio.get_running_loop()
        plog.on_durable(lambda _pos: self._wake(loop, handle))
        self.handles[(topic, partition)] = handle
        self.taken_over(topic, partition)
        return handle

    def _wake(self, loop: asyncio.AbstractEventLoop, handle: PartitionHandle) -> None:
        """The log's high watermark moved (called on the syncing thread)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(self.notify, handle)

    def append(self, handle: PartitionHandle, batch: DecodedBatch) -> AppendResult:
        """Append one decoded produce batch (not yet durable), its codec kept for Fetch."""
        producer = None
        if batch.producer_id >= 0:
            producer = ProducerBatch(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.count,
                transactional=batch.transactional,
            )
        return handle.log.append(batch.records, producer=producer, durable=False, codec=batch.codec)

    async def wait_durable(self, handle: PartitionHandle, next_offset: int) -> None:
        """Return once every offset of the partition below ``next_offset`` is fsynced."""
        if handle.log.high_watermark >= next_offset:
            return
        await asyncio.wrap_future(handle.log.durable_future(next_offset))

    # ------------------------------------------------------------------ fetch waiters

    def notify(self, handle: PartitionHandle) -> None:
        waiters, handle.waiters = handle.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

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
        """Pick up manifest versions other writers committed (retention and compaction
        jobs commit without calling the broker), then, if asked, delete files that no
        manifest needs any more (after ``file.delete.delay.ms``). Runs on a worker thread;
        a failure on one partition is logged and the others go on.

        On object storage each of those costs requests per partition (a GET to look for a
        newer manifest, LISTs to collect garbage), so the refresh runs only with the
        garbage collection (every ``gc_interval_ms``), and a partition's garbage is
        collected only after its manifest changed and once more when what that dropped is
        past ``file.delete.delay.ms`` (``_gc_due``). Active segments older than
        ``segment.ms`` are rolled and sealed at every step, appended to or not: readers
        of the bucket see sealed segments only."""
        for handle in handles:
            try:
                if self.tail is not None:
                    handle.log.roll(if_due=True)
                    if not collect_garbage:
                        continue
                before = handle.log.manifest
                after = handle.log.refresh()
                # embedded: a newer epoch is a foreign writer (cluster: the next leader)
                if not self.cluster and handle.log.epochs.superseded and self.foreign is None:
                    self.stop_writes(handle.log.epochs.superseded)
                if after.version != before.version:
                    log.info(
                        "%s: manifest version %d by %s (log start %d -> %d, %d segments)",
                        handle.label,
                        after.version,
                        after.writer or "?",
                        before.log_start_offset,
                        after.log_start_offset,
                        len(after.segments),
                    )
                if collect_garbage and self._gc_due(handle):
                    deleted = handle.log.collect_garbage().deleted
                    if deleted:
                        log.info("%s: deleted %d unreferenced files", handle.label, len(deleted))
            except Exception as e:
                if (handle.topic, handle.partition) in self.handles:
                    log.warning(
                        "%s: manifest refresh or garbage collection failed: %s", handle.label, e
                    )

    def _gc_due(self, handle: PartitionHandle) -> bool:
        """Whether to collect a partition's garbage now: always on a local root; on object
        storage once after each manifest change and once more past the delete delay."""
        if self.tail is None:
            return True
        key = (handle.topic, handle.partition)
        version = handle.log.manifest.version
        seen, again_at = self._gc_seen.get(key, (-1, 0.0))
        now = time.monotonic()
        if version != seen:
            delay_s = handle.log.config.file_delete_delay_ms / 1000
            self._gc_seen[key] = (version, now + delay_s + 1)
            return True
        if again_at and now >= again_at:
            self._gc_seen[key] = (version, 0.0)
            return True
        return False

    def stop_writes(self, error: ForeignWriterError) -> None:
        """Another writer was found on this broker's storage (``error`` says who and
        where): from now on no partition acknowledges a write, none is opened and no
        garbage is collected (``WriterEpochs.fence_writes``); produce gets
        KAFKA_STORAGE_ERROR. Logged once, at ERROR. Reads go on."""
        if self.foreign is None:
            self.foreign = error
            log.error(
                "%s. This broker stops acknowledging writes to every partition of %s: stop "
                "the other writer, check what it wrote, then restart this broker",
                error,
                self.storage.uri,
            )
        for handle in list(self.handles.values()):
            handle.log.epochs.fence_writes(self.foreign)

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        for handle in self.handles.values():
            try:
                handle.log.close()  # syncs, records the recovery point and producer snapshot
            except Exception:
                log.exception("%s: close failed", handle.label)
        self.handles.clear()
