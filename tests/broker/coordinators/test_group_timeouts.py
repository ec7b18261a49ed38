"""The group coordinator's timers, driven directly: session timeouts (a silent member is
removed, heartbeats re-arm the deadline, a member waiting in JoinGroup outlives it),
pending member ids that never come back, and the rebalance timeout.

The spec is Apache Kafka's classic group coordinator (``GroupMetadataManager`` and
``ClassicGroup`` in ``group-coordinator``); where a test pins down what Kafka answers, its
docstring says so, read from that source."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker.coordinators.group_state import State
from sparklog.errors import (
    UnknownMemberIdError,
)

from .group_helpers import GROUP, coordinator, request, stable_pair
from .helpers import eventually, run

# ---------------------------------------------------------------------- timeouts


def test_session_timeout_removes_a_silent_member() -> None:
    async def scenario() -> None:
        c = coordinator()
        first = await c.join(request(session_ms=200))
        me = first.member_id
        await c.sync(GROUP, me, None, 1, {me: b""})
        group = c.groups[GROUP]
        await eventually(lambda: me not in group.members, "the session to expire")
        assert group.state == State.EMPTY and group.generation == 2
        await c.stop()

    run(scenario())


def test_heartbeat_rearms_the_session_timer() -> None:
    """Each heartbeat moves the member's session deadline to one session timeout from now
    (Kafka's heartbeat timer), so a member that keeps heartbeating is never expired."""

    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request(session_ms=5_000))).member_id
        await c.sync(GROUP, me, None, 1, {me: b""})
        member = c.groups[GROUP].members[me]
        assert member.expiry is not None
        before = member.expiry.when()
        await asyncio.sleep(0.05)
        c.heartbeat(GROUP, me, None, 1)
        assert member.expiry is not None and member.expiry.when() > before
        assert member.expiry.when() - asyncio.get_running_loop().time() <= 5.0
        await c.stop()

    run(scenario())


def test_session_timeout_of_a_follower_rebalances() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader = (await c.join(request(session_ms=30_000))).member_id
        pending = asyncio.ensure_future(c.join(request(session_ms=1000)))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        _, follows = await asyncio.gather(c.join(request(leader, session_ms=30_000)), pending)
        follower = follows.member_id
        synced = asyncio.ensure_future(c.sync(GROUP, follower, None, 2, {}))
        await c.sync(GROUP, leader, None, 2, {})
        await synced
        group = c.groups[GROUP]
        await eventually(lambda: follower not in group.members, "the follower's session")
        assert group.state == State.PREPARING
        assert (await c.join(request(leader))).generation_id == 3
        await c.stop()

    run(scenario())


def test_member_waiting_in_join_outlives_its_session_timeout() -> None:
    """Kafka counts a member waiting in JoinGroup as alive: the rebalance, not its session
    timer, decides its fate."""

    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        group = c.groups[GROUP]
        group.members[follower].session_timeout_ms = 30_000
        c.heartbeat(GROUP, follower, None, 2)  # re-armed for 30 s
        rejoin = asyncio.ensure_future(c.join(request(leader, session_ms=150)))
        await eventually(lambda: group.state == State.PREPARING, "a rebalance")
        await asyncio.sleep(0.6)  # four of the leader's session timeouts
        assert leader in group.members
        answers = await asyncio.gather(rejoin, c.join(request(follower)))
        assert [a.generation_id for a in answers] == [3, 3]
        await c.stop()

    run(scenario())


def test_pending_member_id_expires() -> None:
    """A member id handed out with MEMBER_ID_REQUIRED that never comes back is dropped
    after the session timeout (Kafka's pending-member heartbeat timer)."""

    async def scenario() -> None:
        c = coordinator()
        given = (await c.join(request(v4=True, session_ms=200))).member_id
        group = c.groups[GROUP]
        await eventually(lambda: given not in group.pending_ids, "the pending id to expire")
        with pytest.raises(UnknownMemberIdError):
            await c.join(request(given, v4=True))
        await c.stop()

    run(scenario())


def test_rebalance_timeout_drops_members_that_did_not_rejoin() -> None:
    """Kafka: when the rebalance timeout passes, members that did not rejoin are removed
    and the rebalance completes with the others."""

    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        group = c.groups[GROUP]
        group.members[leader].rebalance_timeout_ms = 300
        group.members[follower].rebalance_timeout_ms = 300
        answer = await c.join(request(leader, rebalance_ms=300, protocols=[("range", b"x")]))
        assert answer.generation_id == 3
        assert list(group.members) == [leader]
        await c.stop()

    run(scenario())
