"""The controller: elected among the live brokers, it assigns partition leaders.

Every broker runs ``ControllerRole.run``: it campaigns (``Coordination.campaign``); the
winner, while it holds the controller key, reconciles every ``interval_s`` (and at once
when an etcd watch sees the live brokers, the controller or the assignments change:
``wake``): it reads the live brokers and the current
assignments, asks ``assignment.plan`` what must change, and writes the changes fenced by
its controller epoch. The others campaign again every ``interval_s``, and at once when the
watch sees the controller key go, so when the controller's lease expires (it died, was
paused, or lost etcd) one of them takes over within the lease TTL (plus one interval if
the watch missed it). A deposed controller's fenced writes fail; it
stops acting as controller at its next round (``reconcile`` returns ``False``).

Which partitions exist is given by ``partitions()`` (the topics of the shared storage);
creating topics through the controller comes with the broker's cluster mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparklog.cluster.assignment import Assignment, Partition, plan
from sparklog.cluster.coordination import (
    BrokerInfo,
    Controller,
    Coordination,
    CoordinationError,
)

log = logging.getLogger(__name__)


def _partition_key(coord: Coordination, p: Partition) -> bytes:
    return coord.key("partitions", p[0], p[1])


async def read_assignments(coord: Coordination) -> dict[Partition, Assignment]:
    prefix = coord.key("partitions", "")
    out = {}
    for key, value in (await coord.get_prefix(prefix)).items():
        topic, _, index = key[len(prefix) :].decode().rpartition("/")
        out[(topic, int(index))] = Assignment.from_json(value)
    return out


@dataclass
class ControllerRole:
    """See the module docstring."""

    coord: Coordination
    node_id: int
    partitions: Callable[[], list[Partition]]
    interval_s: float = 0.25
    controller: Controller | None = None
    rounds: int = 0
    moves: list[tuple[Partition, Assignment]] = field(default_factory=list)
    #: set when etcd says brokers, the controller or assignments changed: round at once
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: the partitions as last read, and when (``_partitions``)
    _known: tuple[float, list[Partition]] | None = None

    @property
    def is_controller(self) -> bool:
        return self.controller is not None and self.controller.node_id == self.node_id

    async def reconcile(self) -> bool:
        """One round as controller: write the assignments that must change. False when
        this broker is no longer controller (its fenced write was refused)."""
        assert self.controller is not None
        if await self.coord.controller() != self.controller:
            log.warning("controller %d (epoch %d) was deposed", self.node_id, self.controller.epoch)
            return False
        live = [b.node_id for b in await self.coord.brokers()]
        current = await read_assignments(self.coord)
        changes = plan(await self._partitions(), live, current)
        self.rounds += 1
        if not changes:
            return True
        puts = {_partition_key(self.coord, p): a.to_json() for p, a in changes.items()}
        if not await self.coord.fenced_all(self.controller.epoch, puts):
            log.warning(
                "controller %d (epoch %d) was deposed; its assignments were refused",
                self.node_id,
                self.controller.epoch,
            )
            return False
        for p, a in sorted(changes.items()):
            log.info(
                "controller %d: %s-%d led by %d at epoch %d",
                self.node_id,
                p[0],
                p[1],
                a.leader,
                a.leader_epoch,
            )
        self.moves += sorted(changes.items())
        return True

    async def _partitions(self) -> list[Partition]:
        """The partitions to assign: read from storage (a LIST and GETs on S3), on a worker
        thread so as not to stall the broker's event loop, at most once per
        ``interval_s``. A round the etcd watch woke within an interval of the last read
        (a broker left: its partitions are reassigned) uses that read instead of waiting
        for the store; a topic created meanwhile is assigned by the round after, within an
        interval, as before."""
        now = time.monotonic()
        if self._known is None or now - self._known[0] >= self.interval_s:
            self._known = (now, await asyncio.to_thread(self.partitions))
        return self._known[1]

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign and, while controller, reconcile; until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.controller = await self.coord.campaign(self.node_id)
                if self.is_controller and not await self.reconcile():
                    self.controller = None
            except CoordinationError as e:
                log.warning("controller role of %d: %s", self.node_id, e)
                self.controller = None
            if self.coord.lease_lost.is_set():
                self.controller = None
                return  # registered no more: the broker must register again
            await pause(stop, self.wake, self.interval_s)


async def pause(stop: asyncio.Event, wake: asyncio.Event, interval_s: float) -> None:
    """Wait ``interval_s``, less if ``stop`` or ``wake`` is set (an etcd watch saw a
    change: ``Coordination.watch``); clears ``wake``, so a change seen while the round
    that follows reads etcd wakes the next one."""
    if not wake.is_set() and not stop.is_set():
        waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waits, timeout=interval_s, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
    wake.clear()


async def describe(coord: Coordination) -> dict[str, object]:
    """What ``sparklog cluster describe`` prints: live brokers, the controller, and each
    partition's leader, leader epoch and replicas (with ``online``: its leader is live)."""
    brokers = await coord.brokers()
    live = {b.node_id for b in brokers}
    controller = await coord.controller()
    parts = await read_assignments(coord)
    return {
        "brokers": [vars(b) for b in brokers],
        "controller": None if controller is None else vars(controller),
        "partitions": [
            {
                "topic": t,
                "partition": p,
                "leader": a.leader,
                "leader_epoch": a.leader_epoch,
                "replicas": list(a.replicas),
                "online": a.leader in live,
            }
            for (t, p), a in sorted(parts.items())
        ],
    }


@dataclass
class ClusterView:
    """What a broker knows of the cluster, refreshed from etcd every ``interval_s``: the
    live brokers, the controller, and the partition assignments - what its Metadata,
    FindCoordinator and NOT_LEADER_OR_FOLLOWER answers are built from. ``refresh`` reads
    all three in one pass; ``leads(p)`` is the leader epoch of a partition this broker
    leads (None otherwise). A snapshot may be up to one interval old: writes are fenced
    separately, on the produce path (docs/cluster.md), never by this view."""

    coord: Coordination
    node_id: int
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    controller: Controller | None = None
    assignments: dict[Partition, Assignment] = field(default_factory=dict)
    version: int = 0
    refreshed: float = -1e9  # time.monotonic() when the last good refresh started

    async def refresh(self) -> bool:
        """Read etcd; True if anything changed."""
        started = time.monotonic()
        brokers = {b.node_id: b for b in await self.coord.brokers()}
        controller = await self.coord.controller()
        assignments = await read_assignments(self.coord)
        changed = (brokers, controller, assignments) != (
            self.brokers,
            self.controller,
            self.assignments,
        )
        if changed:
            self.brokers, self.controller, self.assignments = brokers, controller, assignments
            self.version += 1
        self.refreshed = started
        return changed

    def fresh(self, max_age_s: float) -> bool:
        """Whether the last successful refresh started less than ``max_age_s`` ago (a
        broker cut off from etcd stops answering from a view it cannot renew)."""
        return time.monotonic() - self.refreshed < max_age_s

    def leads(self, p: Partition) -> int | None:
        a = self.assignments.get(p)
        return a.leader_epoch if a is not None and a.leader == self.node_id else None

    def leader_of(self, p: Partition) -> BrokerInfo | None:
        a = self.assignments.get(p)
        return None if a is None else self.brokers.get(a.leader)

    async def run(self, stop: asyncio.Event, interval_s: float = 0.25) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except CoordinationError as e:
                log.warning("cluster view of %d: %s", self.node_id, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
