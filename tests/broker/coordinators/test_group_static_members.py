"""Static members (``group.instance.id``, KIP-345) of the group coordinator, driven
directly: their member ids, restarts with no rebalance, a returning leader (KIP-814),
fencing of the old member id, and leaving by instance id.

The spec is Apache Kafka's classic group coordinator (``GroupMetadataManager`` and
``ClassicGroup`` in ``group-coordinator``); where a test pins down what Kafka answers, its
docstring says so, read from that source."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker.coordinators.group_state import State
from sparklog.errors import (
    FencedInstanceIdError,
)

from .group_helpers import GROUP, coordinator, request
from .helpers import eventually, run

# ---------------------------------------------------------------------- static members


def test_static_member_gets_instance_prefixed_id() -> None:
    async def scenario() -> None:
        c = coordinator()
        answer = await c.join(request(instance="i1", v4=True))
        assert answer.error is None and not answer.member_id_required
        assert answer.member_id.startswith("i1-")
        assert c.groups[GROUP].static == {"i1": answer.member_id}
        await c.stop()

    run(scenario())


def test_static_member_restart_into_stable_group_keeps_generation() -> None:
    """KIP-345: a static member that restarts (no member id, known instance) with its
    subscription unchanged takes its old place and assignment; no rebalance."""

    async def scenario() -> None:
        c = coordinator()
        leader = (await c.join(request())).member_id
        pending = asyncio.ensure_future(c.join(request(instance="i1")))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        _, follows = await asyncio.gather(c.join(request(leader)), pending)
        old = follows.member_id
        synced = asyncio.ensure_future(c.sync(GROUP, old, None, 2, {}))
        await c.sync(GROUP, leader, None, 2, {old: b"A"})
        await synced
        back = await c.join(request(instance="i1"))
        new = back.member_id
        assert new != old and back.generation_id == 2
        assert c.groups[GROUP].state == State.STABLE
        assert (await c.sync(GROUP, new, "i1", 2, {}))[0] == b"A"
        await c.stop()

    run(scenario())


def test_static_leader_restart_is_told_to_skip_assignment() -> None:
    """KIP-814: a returning static leader learns the members but keeps the assignment."""

    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request(instance="i1"))).member_id
        await c.sync(GROUP, me, "i1", 1, {me: b"A"})
        back = await c.join(request(instance="i1"))
        assert back.skip_assignment is True and back.leader == back.member_id
        assert len(back.members) == 1
        await c.stop()

    run(scenario())


def test_replaced_static_member_is_fenced() -> None:
    """Kafka's ``validateMember``: a request from the old member id of a static instance
    that has a newer member id is FENCED_INSTANCE_ID."""

    async def scenario() -> None:
        c = coordinator()
        old = (await c.join(request(instance="i1"))).member_id
        await c.sync(GROUP, old, "i1", 1, {old: b"A"})
        await c.join(request(instance="i1"))
        with pytest.raises(FencedInstanceIdError):
            c.heartbeat(GROUP, old, "i1", 1)
        with pytest.raises(FencedInstanceIdError):
            await c.join(request(old, instance="i1"))
        await c.stop()

    run(scenario())


def test_static_member_leaves_by_instance_id() -> None:
    """LeaveGroup v3+ names static members by instance id alone."""

    async def scenario() -> None:
        c = coordinator()
        await c.join(request(instance="i1"))
        c.leave(GROUP, "", "i1")
        group = c.groups[GROUP]
        assert not group.members and not group.static and group.state == State.EMPTY
        await c.stop()

    run(scenario())
