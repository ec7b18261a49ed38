"""Registration under leases, the controller election and its fencing, on a real etcd."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from sparklog.cluster.coordination import (
    BrokerInfo,
    Coordination,
    CoordinationError,
    parse_endpoints,
)
from sparklog_testkit.processes import EtcdCluster


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def broker(i: int) -> BrokerInfo:
    return BrokerInfo(i, "127.0.0.1", 9000 + i, rack=f"r{i % 2}")


def test_registered_brokers_are_listed_and_vanish_when_they_close(etcd: EtcdCluster) -> None:
    async def main() -> None:
        a, b = Coordination(etcd.endpoints), Coordination(etcd.endpoints)
        await a.register(broker(1))
        await b.register(broker(2))
        assert await a.brokers() == [broker(1), broker(2)]
        await b.close()  # a clean stop revokes the lease: gone at once
        assert await a.brokers() == [broker(1)]
        await a.close()

    run(main())


def test_a_node_id_cannot_be_registered_twice(etcd: EtcdCluster) -> None:
    async def main() -> None:
        a, b = Coordination(etcd.endpoints), Coordination(etcd.endpoints)
        await a.register(broker(1))
        with pytest.raises(CoordinationError, match="node id 1 is registered by a live broker"):
            await b.register(BrokerInfo(1, "127.0.0.1", 9999))
        await a.close()
        await b.close()

    run(main())


def test_an_unreachable_advertised_address_is_refused(etcd: EtcdCluster) -> None:
    async def main() -> None:
        a = Coordination(etcd.endpoints)
        with pytest.raises(CoordinationError, match="clients need a host they can reach"):
            await a.register(BrokerInfo(1, "0.0.0.0", 9092))
        await a.close()

    run(main())


def test_a_broker_that_stops_refreshing_its_lease_vanishes_after_the_ttl(
    etcd: EtcdCluster,
) -> None:
    async def main() -> None:
        a, b = Coordination(etcd.endpoints, lease_ttl_ms=1000), Coordination(etcd.endpoints)
        await a.register(broker(1))
        await b.register(broker(2))
        assert a._keepalive is not None
        a._keepalive.cancel()  # as if paused: no more refreshes
        for _ in range(60):
            if [x.node_id for x in await b.brokers()] == [2]:
                break
            await asyncio.sleep(0.1)
        assert [x.node_id for x in await b.brokers()] == [2]
        await a.close()
        await b.close()

    run(main())


def test_one_controller_is_elected_and_its_epoch_is_the_key_revision(etcd: EtcdCluster) -> None:
    async def main() -> None:
        cs = [Coordination(etcd.endpoints) for _ in range(3)]
        for i, c in enumerate(cs):
            await c.register(broker(i + 1))
        won = await asyncio.gather(*(c.campaign(i + 1) for i, c in enumerate(cs)))
        assert len({(w.node_id, w.epoch) for w in won}) == 1  # every broker sees one winner
        assert await cs[0].controller() == won[0]
        for c in cs:
            await c.close()

    run(main())


def test_a_deposed_controller_cannot_write(etcd: EtcdCluster) -> None:
    """A controller paused past its lease wakes believing it leads: its writes compare
    the controller key's create revision and fail; the new controller's succeed."""

    async def main() -> None:
        old, new = Coordination(etcd.endpoints, lease_ttl_ms=1000), Coordination(etcd.endpoints)
        await old.register(broker(1))
        await new.register(broker(2))
        first = await old.campaign(1)
        assert first.node_id == 1
        assert await old.fenced(first.epoch, {old.key("x"): b"from 1"})
        assert old._keepalive is not None
        old._keepalive.cancel()  # paused: its lease expires, the controller key goes
        for _ in range(60):
            second = await new.campaign(2)
            if second.node_id == 2:
                break
            await asyncio.sleep(0.1)
        assert second.node_id == 2 and second.epoch > first.epoch
        assert not await old.fenced(first.epoch, {old.key("x"): b"zombie"})
        assert await new.fenced(second.epoch, {new.key("x"): b"from 2"})
        assert await new.get(new.key("x")) == b"from 2"
        await old.close()
        await new.close()

    run(main())


def test_the_client_moves_to_a_live_member_when_one_is_down(etcd3: EtcdCluster) -> None:
    async def main() -> None:
        a = Coordination(etcd3.endpoints)
        await a.register(broker(1))
        etcd3.stop_member(a._at)  # the member this client talks to
        assert [b.node_id for b in await a.brokers()] == [1]
        await a.close()

    run(main())


def test_no_etcd_is_a_clear_error() -> None:
    async def main() -> None:
        a = Coordination("127.0.0.1:1", timeout_s=0.5)
        with pytest.raises(CoordinationError, match="etcd at 127.0.0.1:1 did not answer"):
            await a.register(broker(1))
        await a.close()

    run(main())


@pytest.mark.parametrize("spec", ["", "nohost", "h:", ":1", "h:99999", "h:x"])
def test_malformed_endpoints_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_endpoints(spec)


def test_a_broker_whose_lease_expired_learns_it_at_its_next_refresh(etcd: EtcdCluster) -> None:
    async def main() -> None:
        a = Coordination(etcd.endpoints, lease_ttl_ms=1000)
        await a.register(broker(1))
        assert a._keepalive is not None
        a._keepalive.cancel()
        await asyncio.sleep(2.5)  # paused past the TTL
        assert not a.lease_lost.is_set()
        await asyncio.wait_for(a._keep_alive(), 5)  # it wakes and refreshes
        assert a.lease_lost.is_set()
        assert await a.brokers() == []
        await a.close()

    run(main())


def test_producer_id_blocks_reserved_at_once_never_overlap(etcd: EtcdCluster) -> None:
    async def main() -> None:
        cs = [Coordination(etcd.endpoints) for _ in range(4)]
        starts = await asyncio.gather(*(c.reserve_producer_ids(1000) for c in cs for _ in range(5)))
        blocks = sorted(starts)
        assert len(set(blocks)) == 20
        assert all(b - a >= 1000 for a, b in itertools.pairwise(blocks))
        assert await cs[0].reserve_producer_ids(10) == blocks[-1] + 1000
        # a data dir that handed out ids before cluster mode: never below its own counter
        assert await cs[0].reserve_producer_ids(10, at_least=10**6) == 10**6
        assert await cs[1].reserve_producer_ids(10) == 10**6 + 10
        for c in cs:
            await c.close()

    run(main())


def test_a_watch_reports_brokers_joining_and_leaving(etcd: EtcdCluster) -> None:
    async def main() -> None:
        a, b = Coordination(etcd.endpoints), Coordination(etcd.endpoints)
        await a.register(broker(1))
        seen = asyncio.Event()
        stop = asyncio.Event()
        task = asyncio.get_running_loop().create_task(a.watch(("brokers/",), seen.set, stop))
        await asyncio.wait_for(seen.wait(), 5)  # once when the watch is made
        seen.clear()
        await b.register(broker(2))
        await asyncio.wait_for(seen.wait(), 5)
        seen.clear()
        await b.close()
        await asyncio.wait_for(seen.wait(), 5)
        stop.set()
        await asyncio.wait_for(task, 5)
        await a.close()

    run(main())


def test_a_watch_ignores_keys_outside_its_prefixes(etcd: EtcdCluster) -> None:
    async def main() -> None:
        a = Coordination(etcd.endpoints)
        await a.register(broker(1))
        seen = asyncio.Event()
        stop = asyncio.Event()
        task = asyncio.get_running_loop().create_task(a.watch(("brokers/",), seen.set, stop))
        await asyncio.wait_for(seen.wait(), 5)
        seen.clear()
        # the tail keys every round writes must not wake the loops
        await a.call("a put", lambda c: c.put(a.key("tail", "t", "0", "epoch"), b"1"))
        await a.call("a put", lambda c: c.put(a.key("brokersx"), b"1"))
        await asyncio.sleep(1.0)
        assert not seen.is_set()
        stop.set()
        await asyncio.wait_for(task, 5)
        await a.close()

    run(main())
