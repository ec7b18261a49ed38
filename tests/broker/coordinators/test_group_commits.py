"""Which offset commits the group coordinator lets through (``check_commit``, Kafka's
``ClassicGroup.validateOffsetCommit``), and deleting a group.

The spec is Apache Kafka's classic group coordinator (``GroupMetadataManager`` and
``ClassicGroup`` in ``group-coordinator``); where a test pins down what Kafka answers, its
docstring says so, read from that source."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker.coordinators.group_state import JoinResult, State
from sparklog.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from .group_helpers import GROUP, coordinator, request, stable_pair
from .helpers import eventually, run

# ---------------------------------------------------------------------- commits, delete


def test_commit_without_generation_to_empty_group_is_accepted() -> None:
    """Kafka's ``validateOffsetCommit``: generation -1 and no member id (an admin client,
    a standalone consumer) may commit while the group is Empty."""

    async def scenario() -> None:
        c = coordinator()
        c.check_commit(GROUP, "", None, -1)
        me = (await c.join(request())).member_id
        c.leave(GROUP, me, None)
        c.check_commit(GROUP, "", None, -1)

    run(scenario())


def test_commit_without_generation_but_with_member_id_to_empty_group_is_accepted() -> None:
    """Kafka's ``validateOffsetCommit`` accepts any commit with generation -1 while the
    group is Empty, member id or not (a consumer that left its group and commits its
    position on close)."""

    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        c.leave(GROUP, me, None)
        c.check_commit(GROUP, me, None, -1)

    run(scenario())


def test_commit_of_replaced_static_member_is_fenced() -> None:
    """Kafka's ``validateMember`` checks the instance id first: a commit from the old
    member id of a static instance that rejoined as a newer member is FENCED_INSTANCE_ID
    (fatal to the zombie), not UNKNOWN_MEMBER_ID (which would have it rejoin and fence the
    newer member in turn)."""

    async def scenario() -> None:
        c = coordinator()
        old = (await c.join(request(instance="i1"))).member_id
        await c.sync(GROUP, old, "i1", 1, {old: b"A"})
        await c.join(request(instance="i1"))
        with pytest.raises(FencedInstanceIdError):
            c.check_commit(GROUP, old, "i1", 1)
        await c.stop()

    run(scenario())


def test_commit_without_generation_to_live_group_is_unknown_member() -> None:
    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(UnknownMemberIdError):
            c.check_commit(GROUP, "", None, -1)
        await c.stop()

    run(scenario())


def test_commit_by_member_of_stable_group_is_accepted() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        c.check_commit(GROUP, leader, None, 2)
        c.check_commit(GROUP, follower, None, 2)
        await c.stop()

    run(scenario())


def test_commit_with_stale_generation_is_illegal_generation() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, _ = await stable_pair(c)
        with pytest.raises(IllegalGenerationError):
            c.check_commit(GROUP, leader, None, 1)
        await c.stop()

    run(scenario())


def test_commit_by_unknown_member_is_refused() -> None:
    async def scenario() -> None:
        c = coordinator()
        await stable_pair(c)
        with pytest.raises(UnknownMemberIdError):
            c.check_commit(GROUP, "nobody", None, 2)
        await c.stop()

    run(scenario())


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    """Kafka: a valid member and generation in CompletingRebalance gets
    REBALANCE_IN_PROGRESS (it has not synced yet)."""

    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        with pytest.raises(RebalanceInProgressError):
            c.check_commit(GROUP, me, None, 1)
        await c.stop()

    run(scenario())


def test_commit_during_preparing_rebalance_is_accepted() -> None:
    """Kafka's classic protocol lets the current generation commit while the group
    prepares a rebalance (consumers commit in ``onPartitionsRevoked``)."""

    async def scenario() -> None:
        c = coordinator()
        _leader, follower = await stable_pair(c)
        pending = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        c.check_commit(GROUP, follower, None, 2)
        pending.cancel()
        await c.stop()

    run(scenario())


def test_delete_of_non_empty_group_is_refused() -> None:
    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(NonEmptyGroupError):
            c.delete(GROUP)
        await c.stop()

    run(scenario())


def test_delete_of_empty_group_makes_it_dead_and_forgets_it() -> None:
    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        c.leave(GROUP, me, None)
        group = c.groups[GROUP]
        c.delete(GROUP)
        assert group.state == State.DEAD and GROUP not in c.groups
        with pytest.raises(UnknownMemberIdError):
            c.heartbeat(GROUP, me, None, 2)
        answer: JoinResult = await c.join(request())
        assert answer.generation_id == 1  # a new group of that name starts over
        await c.stop()

    run(scenario())
