"""A broker's membership of a cluster (``--etcd``): registration, the controller role, the
partitions it leads, and the fence on its acknowledgements. Design: docs/cluster.md.

``ClusterMember.start`` registers ``brokers/<id>`` under the broker's lease, then runs three
tasks on the broker's event loop:

- the controller role (``ControllerRole.run``: campaign; the winner assigns leaders);
- the cluster view (``ClusterView``, refreshed from etcd every ``VIEW_INTERVAL_S``, and at
  once when a watch of ``WATCHED`` sees a change), whose answers Metadata,
  FindCoordinator and NOT_LEADER_OR_FOLLOWER are built from;
- leadership: after each refresh, partitions newly assigned to this broker are taken over
  at their epoch (``PartitionLog.open(leader_epoch=...)``, on a worker thread), partitions
  assigned elsewhere (or at another epoch) are given up (``PartitionLog.abandon``: appends
  still waiting are never acknowledged).

A take-over runs as its own task, never awaited by the leadership loop: a take-over that
hangs (a GET or an etcd call that never returns) must not keep the loop from seeing that
the lease was lost, giving every partition up and registering again. A take-over that ends
after its partition was assigned elsewhere, at another epoch, after a lost lease (the
lease generation changed) or after ``stop`` is abandoned, not installed; the partition is
not taken over again until that task has ended, so one process never opens two logs of it.

Who may write what, under which epoch:
- a partition's files and manifest: only the broker the controller assigned it at epoch E,
  after committing E to the manifest; its older leaders' manifest commits are refused
  from then on (``transforms.Fenced``);
- acknowledgements: every group-commit round of a led partition calls ``EpochFence.check``
  after its fsync and before its high watermark moves; the check is one linearizable etcd
  read confirming ``partitions/<t>/<p> == {leader: me, leader_epoch: E}``, shared by every
  partition whose round waits at that moment. A failed check (another leader, etcd
  unreachable, this broker's lease gone) raises ``NotLeaderError``: nothing is acked.

``EpochFence.check`` blocks its caller (a storage thread, or whoever syncs the log) on a
read that runs on the fence's own thread and etcd client, never on the broker's event loop.
The broker still closes its logs on a worker thread in cluster mode, so that a slow etcd
does not stall every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparklog.broker.coordinators.group_offsets import OFFSETS_TOPIC, offsets_partition
from sparklog.broker.partitions import PartitionManager
from sparklog.cluster.assignment import Assignment, Partition
from sparklog.cluster.controller import ClusterView, ControllerRole, pause
from sparklog.cluster.coordination import (
    BrokerInfo,
    Coordination,
    CoordinationError,
    NodeIdTakenError,
)
from sparklog.cluster.etcd import EtcdSettings
from sparklog.errors import NotLeaderError, SparkLogError
from sparklog.storage import names

log = logging.getLogger(__name__)
#: partitions a broker takes over at once
TAKE_OVER_THREADS = 8
#: how long at most an internal partition's take-over waits for user take-overs (``_apply``)
USERS_FIRST_S = 5.0

VIEW_INTERVAL_S = 0.25
TOPIC_SYNC_S = 1.0
FENCE_TIMEOUT_S = 5.0
#: how long ``stop`` waits for take-overs still running
STOP_WAIT_S = 10.0
PRODUCER_ID_BLOCK = 1000
#: the keys whose changes wake the controller round and the leadership loop at once
WATCHED = ("brokers/", "controller", "partitions/")


def _internal(p: Partition) -> bool:  # __consumer_offsets, __transaction_state
    return p[0].startswith("__")


def _users_first(item: tuple[Partition, int]) -> tuple[bool, Partition]:
    """Take-over order: user topics, then the internal ones (``__consumer_offsets``...)."""
    return _internal(item[0]), item[0]


class EpochFence:
    """Confirms this broker still leads partitions at their epochs, batching the checks of
    concurrent group-commit rounds into one etcd read (see the module docstring).

    A check registers its key, then waits for a read that *started after* it registered
    (so the answer is no older than the check) - started by itself if no read is running,
    else the next one. ``reads`` and ``checks`` count both, for the benchmark.

    The reads run on the fence's own thread and event loop, with their own etcd client:
    a check must never wait for the broker's event loop, which may itself be waiting for
    the check (an append on the loop that rolls the segment waits for the sync token,
    which the round being checked holds)."""

    def __init__(
        self, etcd: EtcdSettings, cluster: str, node_id: int, lease_lost: asyncio.Event
    ) -> None:
        self.node_id = node_id
        self.lease_lost = lease_lost  # the broker's; only read here
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name=f"sparklog-fence-{node_id}", daemon=True
        )
        self._thread.start()
        self.coord = Coordination(etcd, cluster=cluster)
        self._cv = threading.Condition()
        self._pending: set[bytes] = set()
        self._started = 0  # reads started so far
        self._reading = False
        self._seen: dict[bytes, tuple[int, bytes | None]] = {}  # key -> (read no., value)
        self._failed: tuple[int, str] = (0, "")  # the last read that failed, and why
        self.reads = 0
        self.checks = 0
        self.refused = 0
        self._warned: set[tuple[Partition, int]] = set()

    def check(self, partition: Partition, epoch: int) -> None:
        """Return if this broker leads ``partition`` at ``epoch`` now; else NotLeaderError."""
        if self.lease_lost.is_set():
            raise NotLeaderError(f"{partition[0]}-{partition[1]}: this broker's etcd lease expired")
        key = self.coord.key("partitions", partition[0], partition[1])
        with self._cv:
            self.checks += 1
            self._pending.add(key)
            needed = self._started + 1
            while True:
                seen = self._seen.get(key)
                if seen is not None and seen[0] >= needed:
                    value = seen[1]
                    break
                if self._failed[0] >= needed:
                    self._refuse(partition, epoch, self._failed[1])
                    raise NotLeaderError(
                        f"{partition[0]}-{partition[1]}: leadership unconfirmed: {self._failed[1]}"
                    )
                if not self._reading:
                    self._read_locked()
                    continue
                self._cv.wait()
        a = Assignment.from_json(value) if value is not None else None
        if a is None or a.leader != self.node_id or a.leader_epoch != epoch:
            now = "no leader" if a is None else f"leader {a.leader} at epoch {a.leader_epoch}"
            self._refuse(partition, epoch, f"led at epoch {epoch}, etcd says {now}")
            raise NotLeaderError(
                f"{partition[0]}-{partition[1]}: broker {self.node_id} led it at epoch {epoch}; "
                f"etcd says {now}"
            )

    def _refuse(self, partition: Partition, epoch: int, why: str) -> None:
        """Count a refused round; log the first of each partition and epoch (a broker cut
        off from etcd refuses every round until its partitions move)."""
        self.refused += 1
        level = logging.DEBUG if (partition, epoch) in self._warned else logging.WARNING
        self._warned.add((partition, epoch))
        log.log(
            level, "fence: %s-%d: acknowledgements refused: %s", partition[0], partition[1], why
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.coord.close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    def _read_locked(self) -> None:
        """Run one read of every pending key (called holding ``_cv``; released meanwhile)."""
        self._reading = True
        self._started += 1
        number, keys = self._started, sorted(self._pending)
        self._pending.clear()
        self._cv.release()
        values: dict[bytes, bytes | None] | None = None
        why = ""
        try:
            fut = asyncio.run_coroutine_threadsafe(self.coord.get_many(keys), self.loop)
            values = fut.result(FENCE_TIMEOUT_S)
        except Exception as e:  # unreachable etcd, a closed loop, a timeout
            why = str(e) or type(e).__name__
        finally:
            self._cv.acquire()
            self._reading = False
            self.reads += 1
            if values is None:
                self._failed = (number, why)
            else:
                for k, v in values.items():
                    self._seen[k] = (number, v)
            self._cv.notify_all()


class ClusterMember:
    """See the module docstring."""

    def __init__(
        self,
        manager: PartitionManager,
        *,
        etcd: EtcdSettings,
        cluster: str,
        lease_ttl_ms: int,
        node_id: int,
        rack: str | None,
        on_gained: Callable[[str, int], None],
        on_lost: Callable[[str, int], None],
        ack_fence: bool = True,
        peer_settings: Callable[[BrokerInfo], Any] | None = None,
    ) -> None:
        self.ack_fence = ack_fence
        self.manager = manager
        self.node_id = node_id
        self.rack = rack
        #: how to call another broker (inter-broker listener and credentials)
        self.peer_settings = peer_settings
        self.coord = Coordination(etcd, cluster=cluster, lease_ttl_ms=lease_ttl_ms)
        self._etcd, self._cluster = etcd, cluster
        self.view = ClusterView(self.coord, node_id)
        self.role = ControllerRole(self.coord, node_id, self._all_partitions)
        self.fence: EpochFence | None = None
        self._on_gained = on_gained
        self._on_lost = on_lost
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()  # set by the etcd watch (``_changed``)
        self._tasks: list[asyncio.Task[None]] = []
        #: take-overs run in parallel (each waits on etcd and, on object storage, on the
        #: ranged GETs of its cache rebuild); closes of given-up logs too
        self._pool = ThreadPoolExecutor(TAKE_OVER_THREADS, thread_name_prefix="sparklog-takeover")
        self._pids = (0, 0)  # the reserved producer id block: next, limit
        self._pid_lock = asyncio.Lock()
        self.leadership_changes = 0
        #: take-overs running (see the module docstring), by partition
        self._taking: dict[Partition, asyncio.Task[None]] = {}
        #: internal partitions held back for user take-overs (``_apply``), since when
        self._held: dict[Partition, float] = {}
        #: lease generation: +1 at each lost lease; a take-over started before is abandoned
        self._generation = 0
        self._host_port = ("", 0)
        self._listeners: tuple[tuple[str, str, int], ...] = ()

    # ------------------------------------------------------------------ lifecycle

    async def start(
        self, host: str, port: int, endpoints: dict[str, tuple[str, int]] | None = None
    ) -> None:
        """Register, then run the tasks. A node id still registered is waited for up to
        two lease TTLs: a broker restarted right after a crash finds its previous
        incarnation's key until that lease expires; a second live process with the same id
        keeps it alive, and this one gives up with ``NodeIdTakenError``."""
        self._host_port = (host, port)
        self._listeners = tuple((p, h, pt) for p, (h, pt) in (endpoints or {}).items())
        deadline = time.monotonic() + 2 * self.coord.ttl_s + 1
        said = False  # the wait is logged once, not at every retry
        while True:
            try:
                await self.coord.register(self._info(host, port))
                break
            except NodeIdTakenError as e:
                if time.monotonic() > deadline:
                    raise
                if not said:
                    log.info(
                        "%s; waiting up to %.0f s for its lease to expire",
                        e,
                        deadline - time.monotonic(),
                    )
                    said = True
                await asyncio.sleep(0.5)
        self.fence = EpochFence(self._etcd, self._cluster, self.node_id, self.coord.lease_lost)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.role.run(self._stop)),
            loop.create_task(self._lead()),
            loop.create_task(self.coord.watch(WATCHED, self._changed, self._stop)),
        ]
        log.info(
            "broker %d joined the cluster (etcd %s)",
            self.node_id,
            ",".join(f"{h}:{p}" for h, p in self.coord.endpoints),
        )

    async def stop(self) -> None:
        """Give up every partition (closing its log: what was appended is acked if the fence
        still passes), then leave etcd, so the controller moves the partitions at once."""
        self._stop.set()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        hung: set[asyncio.Task[None]] = set()
        if self._taking:  # they end soon (and abandon what they opened), unless hung
            _done, hung = await asyncio.wait(list(self._taking.values()), timeout=STOP_WAIT_S)
            if hung:
                log.warning(
                    "broker %d: %d take-overs still running at stop, left behind",
                    self.node_id,
                    len(hung),
                )
        loop = asyncio.get_running_loop()
        for key in list(self.manager.handles):
            handle = self.manager.handles.pop(key)
            with contextlib.suppress(Exception):
                await loop.run_in_executor(self._pool, handle.log.close)
            self.manager.notify(handle)
        self._pool.shutdown(wait=not hung, cancel_futures=True)
        if self.fence is not None:
            f = self.fence
            log.info(
                "broker %d: the fence ran %d checks in %d etcd reads, refused %d",
                self.node_id,
                f.checks,
                f.reads,
                f.refused,
            )
            f.close()
        await self.coord.close()

    def _changed(self) -> None:
        """etcd says brokers, the controller or assignments changed: both loops at once."""
        self._wake.set()
        self.role.wake.set()

    def _all_partitions(self) -> list[Partition]:
        return [
            (name, p)
            for name, meta in self.manager.topics().items()
            for p in range(meta.partitions)
        ]

    # ------------------------------------------------------------------ leadership

    async def _lead(self) -> None:
        next_sync = 0.0
        while not self._stop.is_set():
            try:
                # the assignments first: a take-over the watch woke this loop for must not
                # wait for the topic sync's reads from the store
                await self.view.refresh()
                await self._apply(self.view.assignments)
                if time.monotonic() >= next_sync:  # configs or deletes via another broker
                    next_sync = time.monotonic() + TOPIC_SYNC_S
                    # read on a worker thread (GETs on S3), applied here on the loop
                    found = await asyncio.to_thread(self.manager.read_topics)
                    for key in self.manager.apply_topics(found):
                        await self._give_up(key, "its topic was deleted")
            except CoordinationError as e:
                log.warning("broker %d: cluster view: %s", self.node_id, e)
            except Exception:
                log.exception("broker %d: applying the assignments failed", self.node_id)
            if self.coord.lease_lost.is_set():
                self._generation += 1  # take-overs still running are abandoned at their end
                await self._give_up_all("this broker's etcd lease expired")
                await self._rejoin()
            await pause(self._stop, self._wake, VIEW_INTERVAL_S)

    async def _rejoin(self) -> None:
        """After a lost lease (a pause or a cut from etcd longer than the TTL): register
        again under a new lease, and campaign again."""
        host, port = self._advertised
        try:
            await self.coord.register(self._info(host, port))
        except CoordinationError as e:
            log.warning("broker %d: could not register again yet: %s", self.node_id, e)
            return
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.role.run(self._stop)))
        log.info("broker %d registered again", self.node_id)

    def _info(self, host: str, port: int) -> BrokerInfo:
        return BrokerInfo(self.node_id, host, port, self.rack, self._listeners)

    @property
    def _advertised(self) -> tuple[str, int]:
        return self._host_port

    async def _apply(self, assignments: dict[Partition, Assignment]) -> None:
        mine = {p: a.leader_epoch for p, a in assignments.items() if a.leader == self.node_id}
        for key, handle in list(self.manager.handles.items()):
            if mine.get(key) != handle.leader_epoch:
                await self._give_up(key, "assigned elsewhere")
        loop = asyncio.get_running_loop()
        # users' partitions first; internal ones (NOT_COORDINATOR meanwhile) once no user
        # take-over runs, or after USERS_FIRST_S held (docs/cluster.md, Partition leadership)
        now = time.monotonic()
        self._held = {p: t for p, t in self._held.items() if p in mine}
        users_taking = any(not _internal(p) for p in self._taking)
        for p, epoch in sorted(mine.items(), key=_users_first):
            if p in self.manager.handles or p in self._taking:
                continue
            held = now - self._held.setdefault(p, now) if _internal(p) else USERS_FIRST_S
            if users_taking and held < USERS_FIRST_S:
                continue
            self._held.pop(p, None)
            # its produce requests wait, in order, for the take-over (``taking_over``)
            self.manager.taking_over(*p)
            self._taking[p] = loop.create_task(self._take_over(loop, p, epoch))
            users_taking |= not _internal(p)

    async def _take_over(self, loop: asyncio.AbstractEventLoop, p: Partition, epoch: int) -> None:
        try:
            await self._open_and_install(loop, p, epoch)
        finally:
            self._taking.pop(p, None)
            self.manager.taken_over(*p)  # (an installed one was released at install)
            self._wake.set()  # internal partitions held back for user ones (``_apply``)

    def _still_mine(self, p: Partition, epoch: int, generation: int) -> bool:
        """Whether a take-over that just ended may install its log (module docstring)."""
        if self._stop.is_set() or self.coord.lease_lost.is_set():
            return False
        assignment = self.view.assignments.get(p)
        return (
            generation == self._generation
            and assignment is not None
            and assignment.leader == self.node_id
            and assignment.leader_epoch == epoch
        )

    async def _open_and_install(
        self, loop: asyncio.AbstractEventLoop, p: Partition, epoch: int
    ) -> None:
        generation = self._generation
        if self._stop.is_set() or self.manager.foreign is not None:
            return  # stopping, or another writer on the storage (stop_writes)
        try:
            self.manager.topic(p[0])
        except SparkLogError:
            return  # deleted meanwhile; the controller drops it next round
        fence = self._fence_for(p, epoch)
        try:
            plog = await loop.run_in_executor(
                self._pool, self.manager.open_led, p[0], p[1], epoch, fence
            )
        except Exception as e:  # any failure: siblings go on; the next view tries again
            log.warning(
                "broker %d: taking %s-%d over at epoch %d failed: %s",
                self.node_id,
                p[0],
                p[1],
                epoch,
                e,
                exc_info=not isinstance(e, SparkLogError),
            )
            return
        if not self._still_mine(p, epoch, generation):
            plog.abandon(NotLeaderError(f"{p[0]}-{p[1]}: no longer assigned here"))
            log.info(
                "broker %d: the take-over of %s-%d at epoch %d ended after it was no "
                "longer this broker's; abandoned",
                self.node_id,
                p[0],
                p[1],
                epoch,
            )
            return
        self.manager.install(p[0], p[1], plog, epoch)
        self.leadership_changes += 1
        log.info(
            "broker %d leads %s-%d at epoch %d from offset %d",
            self.node_id,
            p[0],
            p[1],
            epoch,
            plog.log_end_offset,
        )
        self._on_gained(p[0], p[1])

    def _fence_for(self, p: Partition, epoch: int) -> Callable[[], None] | None:
        fence = self.fence
        assert fence is not None
        if not self.ack_fence:
            return None  # measurement only (Broker's ack_fence): acks are then unfenced
        return lambda: fence.check(p, epoch)

    async def _give_up(self, key: tuple[str, int], why: str) -> None:
        handle = self.manager.handles.pop(key, None)
        if handle is None:
            return
        handle.log.abandon(NotLeaderError(f"{handle.label}: {why}"))
        self.manager.notify(handle)
        self.leadership_changes += 1
        log.info(
            "broker %d gave up %s (epoch %d): %s",
            self.node_id,
            handle.label,
            handle.leader_epoch,
            why,
        )
        self._on_lost(*key)

    async def give_up_topic(self, name: str) -> None:
        """A topic deleted through this broker: give up the partitions of it that this
        broker leads, as the topic sync does for a deletion through another broker."""
        for key in [k for k in self.manager.handles if k[0] == name]:
            await self._give_up(key, "its topic was deleted")

    async def _give_up_all(self, why: str) -> None:
        for key in list(self.manager.handles):
            await self._give_up(key, why)

    # ------------------------------------------------------------------ answers

    @property
    def view_fresh(self) -> bool:
        """Whether the cluster view was renewed within the lease TTL: a broker cut off
        from etcd answers as if no partition had a leader, so clients ask another."""
        return self.view.fresh(self.coord.ttl_s)

    def leader_of(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader node id, leader epoch) as the view says; (-1, -1) when unassigned or the
        view is stale."""
        a = self.view.assignments.get((topic, partition))
        if a is None or not self.view_fresh:
            return -1, -1
        return (a.leader if a.leader in self.view.brokers else -1), a.leader_epoch

    def coordinator_of(self, group: str) -> int:
        """The group's coordinator: the leader of its ``__consumer_offsets`` partition, as
        in Kafka (-1 while that partition has no live leader)."""
        return self.leader_of(OFFSETS_TOPIC, offsets_partition(group))[0]

    async def next_producer_id(self) -> int:
        """A producer id no broker of the cluster hands out again (blocks reserved through
        etcd, never below this data dir's own embedded-mode counter)."""
        async with self._pid_lock:
            nxt, limit = self._pids
            if nxt >= limit:
                start = await self.coord.reserve_producer_ids(
                    PRODUCER_ID_BLOCK, at_least=self._embedded_counter()
                )
                nxt, limit = start, start + PRODUCER_ID_BLOCK
            self._pids = (nxt + 1, limit)
            return nxt

    async def write_remote_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_s: float = 30.0,
    ) -> None:
        """Send a transaction marker to the partition's leader (WriteTxnMarkers v1), again
        until it is written: a transaction's outcome, once prepared, must reach every one
        of its partitions, through leader changes (the marker is idempotent)."""
        from sparklog.kafka import wire
        from sparklog.kafka.client import KafkaClient

        body = {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "topics": [{"name": topic, "partition_indexes": [partition]}],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        deadline = time.monotonic() + timeout_s
        loop = asyncio.get_running_loop()
        why = "no leader"
        while time.monotonic() < deadline:
            node, _ = self.leader_of(topic, partition)
            b = self.view.brokers.get(node)
            if b is not None:

                def send(b: BrokerInfo = b) -> int:
                    settings = (
                        self.peer_settings(b) if self.peer_settings else (f"{b.host}:{b.port}")
                    )
                    with KafkaClient(settings, timeout_s=10) as c:
                        r = c.request(wire.ApiKey.WRITE_TXN_MARKERS, 1, body)
                    return int(r.markers[0].topics[0].partitions[0].error_code)

                try:
                    code = await loop.run_in_executor(None, send)
                    if code == 0:
                        return
                    why = f"error code {code} from broker {node}"
                except (SparkLogError, OSError) as e:
                    why = f"broker {node}: {e}"
            await asyncio.sleep(0.2)
        raise NotLeaderError(f"marker for {topic}-{partition} not written in {timeout_s} s: {why}")

    def _embedded_counter(self) -> int:
        fs, root = self.manager.storage.fs, self.manager.storage.root
        try:
            return int(
                json.loads(fs.read_bytes(fs.join(root, names.PRODUCER_IDS_FILE)))["next_block"]
            )
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return 0
