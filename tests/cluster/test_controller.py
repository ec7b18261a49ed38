"""The controller role on a real etcd: one controller assigns every partition; a broker
that leaves loses its partitions at a higher epoch; a deposed controller writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sparklog.broker.membership import WATCHED
from sparklog.cluster.assignment import plan
from sparklog.cluster.controller import ControllerRole, read_assignments
from sparklog.cluster.coordination import BrokerInfo, Coordination
from sparklog_testkit.processes import EtcdCluster

PARTS = [("t", i) for i in range(6)] + [("u", 0), ("u", 1)]


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def start(
    etcd: EtcdCluster, ids: list[int], ttl_ms: int = 1000, *, interval_s: float = 0.1
) -> list[Any]:
    out = []
    for i in ids:
        c = Coordination(etcd.endpoints, lease_ttl_ms=ttl_ms)
        await c.register(BrokerInfo(i, "127.0.0.1", 9000 + i))
        role = ControllerRole(c, i, lambda: PARTS, interval_s=interval_s)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        task = loop.create_task(role.run(stop))
        watch = loop.create_task(c.watch(WATCHED, role.wake.set, stop))
        out.append((c, role, stop, asyncio.gather(task, watch)))
    return out


async def shut(brokers: list[Any]) -> None:
    for c, _role, stop, task in brokers:
        stop.set()
        await task
        await c.close()


def test_one_controller_assigns_every_partition_evenly(etcd: EtcdCluster) -> None:
    async def main() -> None:
        brokers = await start(etcd, [1, 2, 3])
        coord = brokers[0][0]

        async def spread() -> bool:  # brokers registered one by one: it rebalances
            a = await read_assignments(coord)
            counts = sorted(sum(1 for x in a.values() if x.leader == b) for b in (1, 2, 3))
            return set(a) == set(PARTS) and counts == [2, 3, 3]

        await until(spread)
        assert sum(role.is_controller for _c, role, _s, _t in brokers) == 1
        a = await read_assignments(coord)
        assert all(x.leader in x.replicas for x in a.values())
        await shut(brokers)

    asyncio.run(main())


def test_a_leaving_broker_loses_its_partitions_at_a_higher_epoch(etcd: EtcdCluster) -> None:
    async def main() -> None:
        brokers = await start(etcd, [1, 2, 3])
        coord = brokers[0][0]
        await until(lambda: _all_assigned(coord))
        before = await read_assignments(coord)
        # stop a broker that is not the controller: its lease is revoked on close
        victim = next(b for b in brokers if not b[1].is_controller)
        await shut([victim])
        gone = victim[1].node_id

        async def moved() -> bool:
            a = await read_assignments(coord)
            return all(x.leader != gone for x in a.values())

        await until(moved)
        after = await read_assignments(coord)
        for p, x in after.items():
            if before[p].leader == gone:
                assert x.leader_epoch == before[p].leader_epoch + 1
            else:
                assert x == before[p]  # untouched
        await shut([b for b in brokers if b is not victim])

    asyncio.run(main())


def test_a_leaving_broker_is_seen_at_once_not_at_the_next_round(etcd: EtcdCluster) -> None:
    async def main() -> None:
        # rounds a minute apart: only the watch can make the controller act in time
        brokers = await start(etcd, [1, 2, 3], interval_s=60.0)
        coord = brokers[0][0]
        await until(lambda: _all_assigned(coord))
        victim = next(b for b in brokers if not b[1].is_controller)
        gone = victim[1].node_id
        await shut([victim])

        async def moved() -> bool:
            return all(x.leader != gone for x in (await read_assignments(coord)).values())

        await until(moved)
        await shut([b for b in brokers if b is not victim])

    asyncio.run(main())


def test_when_the_controller_is_paused_another_takes_over_and_it_writes_nothing(
    etcd: EtcdCluster,
) -> None:
    async def main() -> None:
        brokers = await start(etcd, [1, 2, 3])
        coord = brokers[0][0]
        await until(lambda: _all_assigned(coord))
        old = next(b for b in brokers if b[1].is_controller)
        old_c, old_role, old_stop, old_task = old
        old_stop.set()  # its loop stops and its lease refreshes stop: as if paused
        await old_task
        assert old_c._keepalive is not None
        old_c._keepalive.cancel()
        others = [b for b in brokers if b is not old]

        async def new_controller() -> bool:
            return any(b[1].is_controller for b in others) and all(
                x.leader != old_role.node_id for x in (await read_assignments(coord)).values()
            )

        await until(new_controller)
        new_epoch = next(b[1].controller.epoch for b in others if b[1].is_controller)
        assert new_epoch > old_role.controller.epoch
        # the paused controller wakes up still believing it leads, and reconciles
        snapshot = await read_assignments(coord)
        assert not await old_role.reconcile()  # refused: fenced by the controller epoch
        assert await read_assignments(coord) == snapshot
        await old_c.close()
        await shut(others)

    asyncio.run(main())


async def _all_assigned(coord: Coordination) -> bool:
    """Every partition assigned, and the controller has nothing left to move (brokers
    registered one by one, each woke it: it may still be balancing)."""
    current = await read_assignments(coord)
    live = [b.node_id for b in await coord.brokers()]
    return set(current) == set(PARTS) and not plan(PARTS, live, current)


def test_cluster_describe_shows_brokers_the_controller_and_leaders(
    etcd: EtcdCluster, capsys: Any
) -> None:
    import json

    from sparklog.cli.command import main

    async def setup() -> list[Any]:
        brokers = await start(etcd, [1, 2])
        await until(lambda: _all_assigned(brokers[0][0]))
        return brokers

    async def down(brokers: list[Any]) -> None:
        await shut(brokers)

    loop = asyncio.new_event_loop()
    try:
        brokers = loop.run_until_complete(setup())
        assert main(["cluster", "describe", "--etcd", etcd.endpoints, "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert [b["node_id"] for b in found["brokers"]] == [1, 2]
        assert found["controller"]["node_id"] in (1, 2)
        assert {(p["topic"], p["partition"]) for p in found["partitions"]} == set(PARTS)
        assert all(p["online"] for p in found["partitions"])
        assert main(["cluster", "describe", "--etcd", etcd.endpoints]) == 0
        text = capsys.readouterr().out
        assert "controller: node" in text and "127.0.0.1:9001" in text
        loop.run_until_complete(down(brokers))
    finally:
        loop.close()


def test_cluster_describe_without_etcd_is_one_clear_line(capsys: Any) -> None:
    from sparklog.cli.command import main

    assert main(["cluster", "describe", "--etcd", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sparklog: error: etcd at 127.0.0.1:1 did not answer")


def test_a_brokers_view_follows_leaders_and_membership(etcd: EtcdCluster) -> None:
    from sparklog.cluster.controller import ClusterView

    async def main() -> None:
        brokers = await start(etcd, [1, 2])
        coord = brokers[0][0]
        await until(lambda: _all_assigned(coord))
        view = ClusterView(coord, 1)
        assert await view.refresh()
        for _ in range(50):  # until the controller's balancing settles
            await asyncio.sleep(0.3)
            if not await view.refresh():
                break
        assert not await view.refresh()  # nothing changed
        assert set(view.brokers) == {1, 2}
        mine = [p for p in PARTS if view.leads(p) is not None]
        theirs = [p for p in PARTS if view.leads(p) is None]
        assert mine and theirs
        assert all(view.leader_of(p).node_id == 2 for p in theirs)  # type: ignore[union-attr]
        await shut([brokers[1]])  # broker 2 leaves: broker 1 leads everything, epochs bumped
        before = dict(view.assignments)

        async def all_mine() -> bool:
            await view.refresh()
            return all(view.leads(p) is not None for p in PARTS) and set(view.brokers) == {1}

        await until(all_mine)
        assert all(view.leads(p) == before[p].leader_epoch + 1 for p in theirs)
        await shut([brokers[0]])

    asyncio.run(main())


def test_rounds_within_an_interval_reuse_the_partitions_read_and_later_ones_read_again(
    etcd: EtcdCluster,
) -> None:
    """A round the watch wakes (a broker left) assigns from the partition list the round
    before read, not from a new read of the store (a LIST and GETs on S3); once an
    interval has passed the list is read again, so a new topic is assigned."""

    async def main() -> None:
        c = Coordination(etcd.endpoints, lease_ttl_ms=1000)
        await c.register(BrokerInfo(1, "127.0.0.1", 9001))
        parts = list(PARTS)
        reads: list[int] = []

        def partitions() -> list[tuple[str, int]]:
            reads.append(len(parts))
            return list(parts)

        role = ControllerRole(c, 1, partitions, interval_s=0.5)
        role.controller = await c.campaign(1)
        assert await role.reconcile()
        parts.append(("v", 0))
        assert await role.reconcile()  # woken at once: the list read a moment ago
        assert reads == [len(PARTS)]
        assert ("v", 0) not in await read_assignments(c)
        await asyncio.sleep(0.6)
        assert await role.reconcile()
        assert reads == [len(PARTS), len(PARTS) + 1]
        assert ("v", 0) in await read_assignments(c)
        await c.close()

    asyncio.run(main())
