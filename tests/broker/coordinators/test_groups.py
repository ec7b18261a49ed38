"""The group coordinator's state machine, driven directly (``GroupCoordinator``): Kafka's
classic group protocol, Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and
back); joins, syncs, heartbeats, rejoins and leaves, generations, and the refusals of each.
Timeouts, static members and commits have their own modules.

The spec is Apache Kafka's classic group coordinator (``GroupMetadataManager`` and
``ClassicGroup`` in ``group-coordinator``); where a test pins down what Kafka answers, its
docstring says so, read from that source."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker.coordinators.group_state import State
from sparklog.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from .group_helpers import GROUP, coordinator, request, stable_pair, subscription, waiting_in_sync
from .helpers import eventually, run

# ---------------------------------------------------------------------- join


def test_join_without_member_id_v4_is_member_id_required() -> None:
    """KIP-394: JoinGroup v4+ without a member id is answered MEMBER_ID_REQUIRED with a
    member id to come back with; the group stays Empty (Kafka keeps it as a pending
    member, not a member)."""

    async def scenario() -> None:
        c = coordinator()
        answer = await c.join(request(v4=True))
        assert answer.member_id_required and answer.error is None
        assert answer.member_id.startswith("client-")
        group = c.groups[GROUP]
        assert group.state == State.EMPTY and not group.members
        assert answer.member_id in group.pending_ids
        await c.stop()

    run(scenario())


def test_pending_member_rejoins_with_its_id() -> None:
    async def scenario() -> None:
        c = coordinator()
        given = (await c.join(request(v4=True))).member_id
        answer = await c.join(request(given, v4=True))
        assert answer.error is None and not answer.member_id_required
        assert answer.member_id == given and answer.leader == given
        assert not c.groups[GROUP].pending_ids
        await c.stop()

    run(scenario())


def test_first_join_completes_rebalance_to_completing() -> None:
    """One member's join moves Empty -> PreparingRebalance -> CompletingRebalance at
    generation 1; as the leader, it is told every member and its metadata."""

    async def scenario() -> None:
        c = coordinator()
        answer = await c.join(request())
        group = c.groups[GROUP]
        assert group.state == State.COMPLETING
        assert answer.generation_id == group.generation == 1
        assert answer.leader == answer.member_id
        assert answer.protocol_name == "range"
        assert [m.member_id for m in answer.members] == [answer.member_id]
        assert answer.members[0].metadata == subscription("t")
        await c.stop()

    run(scenario())


def test_follower_join_answer_lists_no_members() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader = (await c.join(request())).member_id
        pending = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        led, follows = await asyncio.gather(c.join(request(leader)), pending)
        assert follows.leader == leader and follows.members == ()
        assert len(led.members) == 2
        await c.stop()

    run(scenario())


def test_join_with_unknown_member_id_is_refused() -> None:
    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(UnknownMemberIdError):
            await c.join(request("nobody"))
        await c.stop()

    run(scenario())


def test_join_with_member_id_to_unknown_group_creates_no_group() -> None:
    """Kafka creates a group only for a join without a member id; one with a member id for
    a group it does not know is UNKNOWN_MEMBER_ID and leaves no group behind (ListGroups
    would list it)."""

    async def scenario() -> None:
        c = coordinator()
        with pytest.raises(UnknownMemberIdError):
            await c.join(request("ghost"))
        assert GROUP not in c.groups

    run(scenario())


def test_empty_group_id_is_invalid() -> None:
    async def scenario() -> None:
        with pytest.raises(InvalidGroupIdError):
            await coordinator().join(request(group=""))

    run(scenario())


@pytest.mark.parametrize("session_ms", [5, 60_000])
def test_session_timeout_outside_bounds_is_refused(session_ms: int) -> None:
    """Kafka: INVALID_SESSION_TIMEOUT outside [group.min.session.timeout.ms,
    group.max.session.timeout.ms]."""

    async def scenario() -> None:
        c = coordinator(min_session_timeout_ms=10, max_session_timeout_ms=30_000)
        with pytest.raises(InvalidSessionTimeoutError):
            await c.join(request(session_ms=session_ms))
        assert GROUP not in c.groups or not c.groups[GROUP].members

    run(scenario())


def test_join_with_other_protocol_type_is_inconsistent() -> None:
    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(InconsistentGroupProtocolError):
            await c.join(request(protocol_type="connect"))
        await c.stop()

    run(scenario())


def test_join_sharing_no_protocol_is_inconsistent() -> None:
    """Kafka's ``supportsProtocols``: a non-empty group accepts a member only if one of
    its protocols is supported by every member."""

    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(InconsistentGroupProtocolError):
            await c.join(request(protocols=[("roundrobin", b"")]))
        await c.stop()

    run(scenario())


@pytest.mark.parametrize(("protocol_type", "protocols"), [("", [("range", b"")]), ("consumer", [])])
def test_join_without_protocol_type_or_protocols_is_inconsistent(
    protocol_type: str, protocols: list[tuple[str, bytes]]
) -> None:
    """Kafka's ``supportsProtocols`` for an Empty group: a member needs a protocol type and
    at least one protocol, else INCONSISTENT_GROUP_PROTOCOL (such a member would leave the
    group no protocol every later member shares)."""

    async def scenario() -> None:
        c = coordinator()
        with pytest.raises(InconsistentGroupProtocolError):
            await c.join(request(protocol_type=protocol_type, protocols=protocols))
        assert GROUP not in c.groups or not c.groups[GROUP].members
        await c.stop()

    run(scenario())


def test_protocol_is_chosen_by_vote_among_common_ones() -> None:
    """Kafka's ``selectProtocol``: each member votes for its first protocol that every
    member supports; the most votes win (here two votes for range, one for sticky; "x",
    supported by one member only, is no candidate)."""

    async def scenario() -> None:
        c = coordinator()
        first = await c.join(request(protocols=[("sticky", b""), ("range", b"")]))
        prefers_range = [("x", b""), ("range", b""), ("sticky", b"")]
        second = asyncio.ensure_future(c.join(request(protocols=prefers_range)))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        third = asyncio.ensure_future(c.join(request(protocols=[("range", b""), ("sticky", b"")])))
        await eventually(lambda: len(c.groups[GROUP].members) == 3, "the third join")
        rejoin = c.join(request(first.member_id, protocols=[("sticky", b""), ("range", b"")]))
        answers = await asyncio.gather(rejoin, second, third)
        assert {a.protocol_name for a in answers} == {"range"}
        await c.stop()

    run(scenario())


def test_initial_rebalance_delay_lands_members_in_one_generation() -> None:
    """Kafka's ``group.initial.rebalance.delay.ms``: the first rebalance of an Empty group
    waits, so members starting together get one generation."""

    async def scenario() -> None:
        c = coordinator(initial_rebalance_delay_ms=2000)
        a = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: GROUP in c.groups, "the first join")
        b = asyncio.ensure_future(c.join(request()))  # well within the delay, even if slow
        answers = await asyncio.gather(a, b)
        assert [x.generation_id for x in answers] == [1, 1]
        assert len(c.groups[GROUP].members) == 2
        await c.stop()

    run(scenario())


# ---------------------------------------------------------------------- sync


def test_leader_sync_makes_group_stable() -> None:
    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        assignment, group = await c.sync(GROUP, me, None, 1, {me: b"mine"})
        assert assignment == b"mine"
        assert group.state == State.STABLE
        await c.stop()

    run(scenario())


def test_follower_sync_waits_for_leader_assignment() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        assert c.groups[GROUP].members[follower].assignment == b"F"
        assert c.groups[GROUP].members[leader].assignment == b"L"
        await c.stop()

    run(scenario())


def test_sync_in_stable_group_returns_current_assignment() -> None:
    async def scenario() -> None:
        c = coordinator()
        _leader, follower = await stable_pair(c)
        assignment, _ = await c.sync(GROUP, follower, None, 2, {})
        assert assignment == b"F"
        await c.stop()

    run(scenario())


def test_sync_with_wrong_generation_is_illegal_generation() -> None:
    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        with pytest.raises(IllegalGenerationError):
            await c.sync(GROUP, me, None, 7, {})
        await c.stop()

    run(scenario())


def test_sync_of_unknown_member_is_refused() -> None:
    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(UnknownMemberIdError):
            await c.sync(GROUP, "nobody", None, 1, {})
        await c.stop()

    run(scenario())


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, _ = await stable_pair(c)
        pending = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        with pytest.raises(RebalanceInProgressError):
            await c.sync(GROUP, leader, None, 2, {})
        pending.cancel()
        await c.stop()

    run(scenario())


def test_rebalance_fails_pending_follower_sync() -> None:
    """A follower waiting in SyncGroup when a new member starts a rebalance is answered
    REBALANCE_IN_PROGRESS (Kafka: ``resetAndPropagateAssignmentWithError``)."""

    async def scenario() -> None:
        c = coordinator()
        leader = (await c.join(request())).member_id
        pending = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        _, follows = await asyncio.gather(c.join(request(leader)), pending)
        synced = asyncio.ensure_future(c.sync(GROUP, follows.member_id, None, 2, {}))
        await waiting_in_sync(c, follows.member_id)
        newcomer = asyncio.ensure_future(c.join(request()))
        with pytest.raises(RebalanceInProgressError):
            await synced
        newcomer.cancel()
        await c.stop()

    run(scenario())


def test_leader_leaving_before_sync_fails_the_followers_sync() -> None:
    """A member leaving during CompletingRebalance starts a new rebalance: followers waiting
    in SyncGroup are answered REBALANCE_IN_PROGRESS and must rejoin."""

    async def scenario() -> None:
        c = coordinator()
        first = await c.join(request())
        pending = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        _, follows = await asyncio.gather(c.join(request(first.member_id)), pending)
        synced = asyncio.ensure_future(c.sync(GROUP, follows.member_id, None, 2, {}))
        await waiting_in_sync(c, follows.member_id)
        c.leave(GROUP, first.member_id, None)
        with pytest.raises(RebalanceInProgressError):
            await synced
        await c.stop()

    run(scenario())


# ---------------------------------------------------------------------- heartbeat


def test_heartbeat_in_stable_group_is_accepted() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        c.heartbeat(GROUP, leader, None, 2)
        c.heartbeat(GROUP, follower, None, 2)
        await c.stop()

    run(scenario())


def test_heartbeat_with_old_generation_is_illegal_generation() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, _ = await stable_pair(c)
        with pytest.raises(IllegalGenerationError):
            c.heartbeat(GROUP, leader, None, 1)
        await c.stop()

    run(scenario())


def test_heartbeat_of_unknown_member_is_refused() -> None:
    async def scenario() -> None:
        c = coordinator()
        await stable_pair(c)
        with pytest.raises(UnknownMemberIdError):
            c.heartbeat(GROUP, "nobody", None, 2)
        await c.stop()

    run(scenario())


def test_heartbeat_to_unknown_group_is_unknown_member() -> None:
    async def scenario() -> None:
        with pytest.raises(UnknownMemberIdError):
            coordinator().heartbeat("nosuch", "m", None, 1)

    run(scenario())


def test_heartbeat_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    """Kafka's classic heartbeat in PreparingRebalance: REBALANCE_IN_PROGRESS (the member
    must rejoin), its session still renewed."""

    async def scenario() -> None:
        c = coordinator()
        _leader, follower = await stable_pair(c)
        pending = asyncio.ensure_future(c.join(request()))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        with pytest.raises(RebalanceInProgressError):
            c.heartbeat(GROUP, follower, None, 2)
        pending.cancel()
        await c.stop()

    run(scenario())


def test_heartbeat_during_completing_rebalance_is_accepted() -> None:
    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        assert c.groups[GROUP].state == State.COMPLETING
        c.heartbeat(GROUP, me, None, 1)
        await c.stop()

    run(scenario())


# ---------------------------------------------------------------------- rejoin


def test_follower_unchanged_rejoin_in_stable_group_does_not_rebalance() -> None:
    """Kafka's ``classicGroupJoinExistingMember``: a follower of a Stable group rejoining
    with its registered metadata gets the current generation back, no rebalance."""

    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        answer = await c.join(request(follower))
        assert answer.generation_id == 2 and answer.leader == leader
        assert c.groups[GROUP].state == State.STABLE
        await c.stop()

    run(scenario())


def test_leader_rejoin_in_stable_group_rebalances() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        rejoin = asyncio.ensure_future(c.join(request(leader)))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        answers = await asyncio.gather(rejoin, c.join(request(follower)))
        assert [a.generation_id for a in answers] == [3, 3]
        await c.stop()

    run(scenario())


def test_changed_metadata_rejoin_rebalances() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        changed = [("range", subscription("t", "u"))]
        rejoin = asyncio.ensure_future(c.join(request(follower, protocols=changed)))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        await asyncio.gather(rejoin, c.join(request(leader)))
        assert c.groups[GROUP].generation == 3
        assert c.groups[GROUP].subscribed_topics() == {"t", "u"}
        await c.stop()

    run(scenario())


# ---------------------------------------------------------------------- leave


def test_leave_rebalances_the_remaining_members() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        c.leave(GROUP, follower, None)
        assert c.groups[GROUP].state == State.PREPARING
        answer = await c.join(request(leader))
        assert answer.generation_id == 3 and len(answer.members) == 1
        await c.stop()

    run(scenario())


def test_leader_leaving_hands_leadership_on() -> None:
    async def scenario() -> None:
        c = coordinator()
        leader, follower = await stable_pair(c)
        c.leave(GROUP, leader, None)
        answer = await c.join(request(follower))
        assert answer.leader == follower
        await c.stop()

    run(scenario())


def test_last_member_leaving_empties_the_group() -> None:
    """Kafka's ``initNextGeneration`` with no members: the generation still advances and
    the group is Empty, with no protocol."""

    async def scenario() -> None:
        c = coordinator()
        me = (await c.join(request())).member_id
        await c.sync(GROUP, me, None, 1, {me: b""})
        c.leave(GROUP, me, None)
        group = c.groups[GROUP]
        assert group.state == State.EMPTY and group.generation == 2
        assert group.protocol_name is None and group.leader_id is None
        await c.stop()

    run(scenario())


def test_leave_of_unknown_member_is_refused() -> None:
    async def scenario() -> None:
        c = coordinator()
        await c.join(request())
        with pytest.raises(UnknownMemberIdError):
            c.leave(GROUP, "nobody", None)
        with pytest.raises(UnknownMemberIdError):
            c.leave("nosuch", "nobody", None)
        await c.stop()

    run(scenario())


def test_leave_answers_a_pending_join_with_unknown_member() -> None:
    """A member removed while it waits in JoinGroup is answered UNKNOWN_MEMBER_ID."""

    async def scenario() -> None:
        c = coordinator()
        leader, _follower = await stable_pair(c)
        rejoin = asyncio.ensure_future(c.join(request(leader)))
        await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "a rebalance")
        c.leave(GROUP, leader, None)
        assert isinstance((await rejoin).error, UnknownMemberIdError)
        await c.stop()

    run(scenario())
