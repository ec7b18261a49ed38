"""The group coordinator: Kafka's classic consumer-group protocol.

States (as Kafka's ``ClassicGroup``): Empty -> PreparingRebalance -> CompletingRebalance
-> Stable, and back to PreparingRebalance when a new member joins, a member leaves, changes
its metadata or misses its session timeout, or the leader rejoins; Dead once deleted.

Join: a member needs a protocol type and protocols that every member supports (else
INCONSISTENT_GROUP_PROTOCOL, as Kafka's ``supportsProtocols``). A member without an id is
given one and told MEMBER_ID_REQUIRED (JoinGroup v4+, KIP-394); it rejoins with it. A
rebalance completes when every known member has rejoined, or after the longest rebalance
timeout (members that did not rejoin are dropped); an Empty group first waits
``initial_rebalance_delay_ms`` so that members starting together land in one generation.
Completion bumps the generation, picks the protocol every member supports (by vote), keeps
or picks the leader, and answers every pending join: the leader gets the members and their
metadata. Sync: the leader's SyncGroup carries every member's assignment; followers wait
for it. Static members (``group.instance.id``) keep their instance across restarts; a
newer member id for the same instance fences the older one (FENCED_INSTANCE_ID). A static
member that restarts (no member id, a known instance) into a Stable group with an
unchanged subscription takes its old place and assignment with no rebalance (KIP-345); a
returning leader is told to skip the assignment (KIP-814).

Rejoin (Kafka's ``classicGroupJoinExistingMember``): a known member's JoinGroup with the
protocols and metadata it registered is answered at once with the current generation,
protocol and leader, rebalancing nothing, from a follower of a Stable group (a client whose
answer was lost) or any member during CompletingRebalance (the leader's lists the members).
The leader's JoinGroup in a Stable group (it rejoins to reassign when topics change) and
changed metadata start a rebalance.

Sessions: each member has its own timer, armed for its session timeout by its join, every
heartbeat, SyncGroup and commit, and firing at that deadline (Kafka's heartbeat timer): the
member is removed and the group rebalances, unless it waits in a JoinGroup. A member id
handed out with MEMBER_ID_REQUIRED that does not come back expires the same way.

Offset commits are checked as Kafka checks them (``ClassicGroup.validateOffsetCommit``): a
commit with generation -1 (a standalone client, a Spark query, an admin reset, a consumer
that left) is accepted while the group has no members, and one with no member id either is
refused otherwise; any other commit must come from a known member (a static instance's old
member id is FENCED_INSTANCE_ID, checked first; else UNKNOWN_MEMBER_ID) at the current
generation (ILLEGAL_GENERATION), and commits during CompletingRebalance get
REBALANCE_IN_PROGRESS. As in Kafka's classic protocol, ownership of the committed partition
is not checked. Committed offsets live in
``sparklog.broker.coordinators.group_offsets.OffsetStore``. Refusals raise a
``sparklog.errors.GroupError`` subclass (a JoinGroup answered later carries it in its
``JoinResult``); the protocol front maps it to its Kafka code. The group's state and the
JoinGroup values live in ``group_state``. All of this runs on the broker's event loop; no
locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from sparklog.broker.coordinators.group_state import (
    Group,
    JoinedMember,
    JoinRequest,
    JoinResult,
    Member,
    State,
)
from sparklog.errors import (
    FencedInstanceIdError,
    GroupError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)


class GroupCoordinator:
    """Every consumer group of one broker; see the module docstring."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int = 500,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 1_800_000,
    ) -> None:
        self.groups: dict[str, Group] = {}
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.min_session_ms = min_session_timeout_ms
        self.max_session_ms = max_session_timeout_ms

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Nothing runs until the first request: session timers are armed per member."""

    async def stop(self) -> None:
        for group in self.groups.values():
            if group.rebalance_task is not None:
                group.rebalance_task.cancel()
            self._drop_pending(group)
            for m in group.members.values():
                if m.expiry is not None:
                    m.expiry.cancel()
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()

    def group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None or g.state == State.DEAD:
            g = Group(group_id)
            self.groups[group_id] = g
        return g

    # ------------------------------------------------------------------ join

    async def join(self, req: JoinRequest) -> JoinResult:
        if not req.group_id:
            raise InvalidGroupIdError("group id is empty")
        if not self.min_session_ms <= req.session_timeout_ms <= self.max_session_ms:
            raise InvalidSessionTimeoutError(
                f"session timeout {req.session_timeout_ms} ms is outside "
                f"[{self.min_session_ms}, {self.max_session_ms}]",
            )
        if not req.protocol_type or not req.protocols:
            raise InconsistentGroupProtocolError(
                f"group {req.group_id!r}: a member needs a protocol type and at least one protocol"
            )
        known = self.groups.get(req.group_id)
        if req.member_id and (known is None or known.state == State.DEAD):
            # only a join without a member id creates a group (Kafka)
            raise UnknownMemberIdError(f"group {req.group_id!r} is unknown")
        group = self.group(req.group_id)
        if (
            group.protocol_type is not None
            and group.members
            and (
                req.protocol_type != group.protocol_type
                or not {n for n, _ in req.protocols} & self._candidate_protocols(group)
            )
        ):
            raise InconsistentGroupProtocolError(
                f"group {req.group_id!r}: protocol type {req.protocol_type!r} or protocols "
                f"{[n for n, _ in req.protocols]} share nothing with the group's"
            )
        member_id = req.member_id
        if req.group_instance_id is not None:
            old = group.static.get(req.group_instance_id)
            if member_id and old is not None and member_id != old:
                raise FencedInstanceIdError(
                    f"group {req.group_id!r}: instance {req.group_instance_id!r} belongs to "
                    f"member {old!r} now"
                )
            if not member_id:
                member_id = f"{req.group_instance_id}-{uuid.uuid4()}"
                if self._unchanged_static_rejoin(group, old, req):
                    assert old is not None
                    return self._replace_static_member(group, old, member_id, req)
                if old is not None and old in group.members:
                    # a restarted static member takes over its old place
                    prev = group.members.pop(old)
                    self._fail(
                        prev,
                        FencedInstanceIdError(
                            f"instance {req.group_instance_id!r} rejoined as {member_id!r}"
                        ),
                    )
                    if group.leader_id == old:
                        group.leader_id = member_id
                group.static[req.group_instance_id] = member_id
        elif not member_id:
            member_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
            if req.requires_known_member_id:
                group.pending_ids[member_id] = asyncio.get_running_loop().call_later(
                    req.session_timeout_ms / 1000, self._pending_expired, group, member_id
                )
                return JoinResult(member_id, member_id_required=True)
        elif member_id not in group.members and member_id not in group.pending_ids:
            raise UnknownMemberIdError(f"group {req.group_id!r} has no member {member_id!r}")
        member = group.members.get(member_id)
        if member is not None and self._unchanged_rejoin(group, member, req):
            return self._joined(group, member_id)
        self._drop_pending(group, member_id)
        if member is None:
            member = req.member(member_id)
            group.members[member_id] = member
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        self._touch(group, member)
        group.protocol_type = req.protocol_type
        if member.join_future is not None and not member.join_future.done():
            member.join_future.cancel()
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        # a new member, changed metadata, the leader's rejoin in a Stable group, or any
        # join during PreparingRebalance (see _unchanged_rejoin for the others)
        self._prepare_rebalance(group, f"member {member_id} joined")
        self._maybe_complete(group)
        return await fut

    @staticmethod
    def _unchanged_rejoin(group: Group, member: Member, req: JoinRequest) -> bool:
        """A known member's JoinGroup that Kafka answers with the current generation and no
        rebalance: the protocols and metadata it registered, in a CompletingRebalance group,
        or in a Stable one from a follower (a leader rejoins to have the group reassigned)."""
        if member.protocols != list(req.protocols):
            return False
        if group.state == State.COMPLETING:
            return True
        return group.state == State.STABLE and member.member_id != group.leader_id

    def _unchanged_static_rejoin(self, group: Group, old: str | None, req: JoinRequest) -> bool:
        """A static member restarting (a new member id for a known instance) into a Stable
        group with the same subscription: Kafka's coordinator (KIP-345) hands it its old
        place and assignment with no rebalance."""
        if old is None or group.state != State.STABLE or old not in group.members:
            return False
        proto = group.protocol_name or ""
        prev = group.members[old]
        return dict(req.protocols).get(proto) == prev.metadata_for(proto)

    def _replace_static_member(
        self, group: Group, old: str, member_id: str, req: JoinRequest
    ) -> JoinResult:
        prev = group.members.pop(old)
        self._fail(
            prev,
            FencedInstanceIdError(f"instance {req.group_instance_id!r} rejoined as {member_id!r}"),
        )
        member = req.member(member_id, assignment=prev.assignment)
        group.members[member_id] = member
        self._touch(group, member)
        assert req.group_instance_id is not None
        group.static[req.group_instance_id] = member_id
        leader = group.leader_id == old
        if leader:
            group.leader_id = member_id
        log.info(
            "group %s: static member %s is back as %s (generation %d, no rebalance)",
            group.group_id,
            req.group_instance_id,
            member_id,
            group.generation,
        )
        # a returning leader learns the members but keeps the current assignment (KIP-814);
        # its SyncGroup in the Stable group returns what it had
        return self._joined(group, member_id, skip_assignment=leader)

    def _joined(self, group: Group, member_id: str, *, skip_assignment: bool = False) -> JoinResult:
        """The JoinGroup answer of ``member_id`` in the group's current generation; the
        leader's lists every member and its metadata for the chosen protocol."""
        protocol = group.protocol_name or ""
        members = tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in group.members.values()
        )
        return JoinResult(
            member_id,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment,
            members=members if member_id == group.leader_id else (),
        )

    def _candidate_protocols(self, group: Group) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in group.members.values()]
        return set.intersection(*sets) if sets else set()

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == State.COMPLETING:
            for m in group.members.values():
                self._fail_sync(m, RebalanceInProgressError(f"group {group.group_id!r}: {reason}"))
        if group.state != State.PREPARING:
            log.info("group %s: rebalancing (%s)", group.group_id, reason)
            delay = self.initial_delay_s if group.state == State.EMPTY else 0.0
            group.state = State.PREPARING
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
            if group.rebalance_task is not None:
                group.rebalance_task.cancel()
            group.rebalance_task = asyncio.get_running_loop().create_task(
                self._rebalance_deadline(group, delay, timeout / 1000)
            )
            group.rebalance_task.delay_until = time.monotonic() + delay  # type: ignore[attr-defined]

    async def _rebalance_deadline(self, group: Group, delay_s: float, timeout_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
                self._maybe_complete(group)
                if group.state != State.PREPARING:
                    return
            await asyncio.sleep(max(timeout_s - delay_s, 0))
            if group.state == State.PREPARING:
                for mid, m in list(group.members.items()):
                    if m.join_future is None or m.join_future.done():
                        log.info("group %s: dropping %s (did not rejoin)", group.group_id, mid)
                        self._remove(group, mid)
                self._complete(group)
        except asyncio.CancelledError:
            pass

    def _maybe_complete(self, group: Group) -> None:
        if group.state != State.PREPARING:
            return
        task = group.rebalance_task
        delay_until = getattr(task, "delay_until", 0.0) if task is not None else 0.0
        if time.monotonic() < delay_until:
            return
        waiting = [
            m for m in group.members.values() if m.join_future is None or m.join_future.done()
        ]
        if not waiting and not group.pending_ids:
            if (
                group.rebalance_task is not None
                and group.rebalance_task is not asyncio.current_task()
            ):
                group.rebalance_task.cancel()
            self._complete(group)

    def _complete(self, group: Group) -> None:
        group.rebalance_task = None
        group.generation += 1
        self._drop_pending(group)
        if not group.members:
            group.state = State.EMPTY
            group.leader_id = None
            group.protocol_name = None
            log.info("group %s: empty (generation %d)", group.group_id, group.generation)
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = State.COMPLETING
        log.info(
            "group %s: generation %d, %d members, protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for mid, m in group.members.items():
            m.assignment = b""
            response = self._joined(group, mid)
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(response)
            m.join_future = None
            self._touch(group, m)

    def _select_protocol(self, group: Group) -> str:
        candidates = self._candidate_protocols(group)
        votes: dict[str, int] = {}
        for m in group.members.values():
            choice = next((n for n, _ in m.protocols if n in candidates), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda n: votes[n]) if votes else ""

    # ------------------------------------------------------------------ sync, heartbeat, leave

    def _member(
        self, group_id: str, member_id: str, instance_id: str | None
    ) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        if group is None or group.state == State.DEAD:
            raise UnknownMemberIdError(f"group {group_id!r} is unknown")
        member = self._known_member(group, member_id, instance_id)
        self._touch(group, member)
        return group, member

    @staticmethod
    def _known_member(group: Group, member_id: str, instance_id: str | None) -> Member:
        """``member_id`` of ``group``; the instance id is checked first, as Kafka's
        ``validateMember`` does: an old member id of a static instance is fenced."""
        if instance_id is not None and group.static.get(instance_id, member_id) != member_id:
            raise FencedInstanceIdError(
                f"group {group.group_id!r}: instance {instance_id!r} belongs to another member now"
            )
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"group {group.group_id!r} has no member {member_id!r}")
        return member

    def _check_generation(self, group: Group, generation: int, rebalancing: State) -> None:
        if generation != group.generation:
            raise IllegalGenerationError(
                f"group {group.group_id!r} is at generation {group.generation}, not {generation}"
            )
        if group.state == rebalancing:
            raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing")

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes],
    ) -> tuple[bytes, Group]:
        group, member = self._member(group_id, member_id, instance_id)
        self._check_generation(group, generation, State.PREPARING)
        if group.state == State.STABLE:
            return member.assignment, group
        if member_id == group.leader_id:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.state = State.STABLE
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(m.assignment)
                m.sync_future = None
            return member.assignment, group
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        member.sync_future = fut
        return await fut, group

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> None:
        group, _member = self._member(group_id, member_id, instance_id)
        self._check_generation(group, generation, State.PREPARING)

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> None:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} is unknown")
        if instance_id is not None and not member_id:
            member_id = group.static.get(instance_id, "")
        if member_id not in group.members:
            raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
        self._remove(group, member_id)
        self._after_removal(group, f"member {member_id} left")

    def _remove(self, group: Group, member_id: str) -> None:
        m = group.members.pop(member_id, None)
        if m is None:
            return
        if m.expiry is not None:
            m.expiry.cancel()
            m.expiry = None
        if m.group_instance_id is not None and group.static.get(m.group_instance_id) == member_id:
            del group.static[m.group_instance_id]
        self._fail(m, UnknownMemberIdError(f"member {member_id!r} left the group"))
        if group.leader_id == member_id:
            group.leader_id = None

    def _after_removal(self, group: Group, reason: str) -> None:
        if group.state in (State.STABLE, State.COMPLETING):
            self._prepare_rebalance(group, reason)
            self._maybe_complete(group)
        elif group.state == State.PREPARING:
            self._maybe_complete(group)

    def _fail(self, m: Member, exc: GroupError) -> None:
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(m.member_id, error=exc))
        self._fail_sync(m, exc)

    def _fail_sync(self, m: Member, exc: GroupError) -> None:
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_exception(exc)
        m.sync_future = None

    # ------------------------------------------------------------------ sessions

    def _touch(self, group: Group, member: Member) -> None:
        """Arm ``member``'s session timer afresh: one session timeout from now."""
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._session_expired, group, member
        )

    def _session_expired(self, group: Group, member: Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member:
            return
        if member.join_future is not None and not member.join_future.done():
            # waiting in JoinGroup counts as alive (Kafka); the join's end re-arms the
            # timer, this one catches a join whose connection went away
            self._touch(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove(group, member.member_id)
        self._after_removal(group, "session timeout")

    def _pending_expired(self, group: Group, member_id: str) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED that never came back."""
        if group.pending_ids.pop(member_id, None) is not None:
            log.info("group %s: pending member %s never joined", group.group_id, member_id)
            self._maybe_complete(group)

    @staticmethod
    def _drop_pending(group: Group, member_id: str | None = None) -> None:
        """Forget one pending member id (it joined), or all of them."""
        ids = list(group.pending_ids) if member_id is None else [member_id]
        for mid in ids:
            handle = group.pending_ids.pop(mid, None)
            if handle is not None:
                handle.cancel()

    # ------------------------------------------------------------------ commits

    def check_commit(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> None:
        """Raise GroupError unless this commit may proceed (see the module docstring)."""
        if not group_id:
            raise InvalidGroupIdError("group id is empty")
        group = self.groups.get(group_id)
        if generation < 0 and (group is None or group.state == State.EMPTY):
            return  # an admin client, or a consumer outside group management
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
        if generation < 0 and not member_id and instance_id is None:
            raise UnknownMemberIdError(
                f"group {group_id!r} has active members; a commit without a generation "
                "is allowed only while it is empty",
            )
        member = self._known_member(group, member_id, instance_id)
        self._check_generation(group, generation, State.COMPLETING)
        self._touch(group, member)

    def delete(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroupError(f"group {group_id!r} has {len(group.members)} members")
        if group is not None:
            group.state = State.DEAD
            del self.groups[group_id]
