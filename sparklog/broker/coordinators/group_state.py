"""A classic consumer group's state, and the JoinGroup request and answer as values.

``Group`` and ``Member`` are what ``sparklog.broker.coordinators.groups.GroupCoordinator``
keeps per group (DescribeGroups, ListGroups and OffsetDelete read them); ``JoinRequest``
and ``JoinResult`` are what a JoinGroup hands the coordinator and gets back. A refusal is a
``sparklog.errors.GroupError`` in ``JoinResult.error``; the protocol front maps it to its
Kafka error code. Not thread-safe: the broker's event loop owns all of it.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from enum import Enum

from sparklog.errors import GroupError


class State(Enum):
    """Kafka's ``ClassicGroupState``; the value is the name DescribeGroups and ListGroups
    answer."""

    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    """One member: what it joined with, its assignment, its session timer, and the
    JoinGroup or SyncGroup it waits in."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    expiry: asyncio.TimerHandle | None = None  # the session timer (see the module docstring)
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[bytes] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")

    def subscribed_topics(self, protocol: str) -> set[str]:
        """The topics of this member's consumer-protocol subscription (Kafka's
        ``ConsumerProtocolSubscription``: version i16, then topics as an i32 count of i16
        length-prefixed strings, in every version); empty if it does not parse."""
        data = self.metadata_for(protocol)
        try:
            (count,) = struct.unpack_from(">i", data, 2)
            pos, topics = 6, set()
            for _ in range(max(count, 0)):
                (n,) = struct.unpack_from(">h", data, pos)
                topics.add(data[pos + 2 : pos + 2 + n].decode())
                pos += 2 + n
            return topics
        except (struct.error, UnicodeDecodeError):
            return set()


@dataclass
class Group:
    """One group: its state and generation, the chosen protocol and leader, its members,
    member ids handed out but not back yet (``pending_ids``), static instances (instance
    id -> member id), and the running rebalance's deadline."""

    group_id: str
    state: State = State.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_ids: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # -> its expiry
    static: dict[str, str] = field(default_factory=dict)
    rebalance_task: asyncio.Task[None] | None = None

    def subscribed_topics(self) -> set[str]:
        """Topics the members of a non-empty consumer group subscribe to (OffsetDelete
        refuses their offsets: GROUP_SUBSCRIBED_TO_TOPIC)."""
        if self.state == State.EMPTY or self.protocol_type != "consumer":
            return set()
        out: set[str] = set()
        for m in self.members.values():
            out |= m.subscribed_topics(self.protocol_name or "")
        return out


@dataclass(frozen=True)
class JoinRequest:
    """A JoinGroup, read from any version (``requires_known_member_id``: v4+, KIP-394)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    requires_known_member_id: bool

    def member(self, member_id: str, assignment: bytes = b"") -> Member:
        """The member this request joins as ``member_id`` (with the ``assignment`` a
        rejoining static member keeps)."""
        return Member(
            member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.protocol_type,
            list(self.protocols),
            assignment=assignment,
        )


@dataclass(frozen=True)
class JoinedMember:
    """One member as the leader's JoinGroup answer lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer. Joined: the generation, protocol and leader, and for the leader
    every member (``skip_assignment``: a returning static leader keeps the assignment,
    KIP-814). Not joined: ``member_id_required`` (KIP-394: come back with ``member_id``),
    or ``error``, why the join was refused."""

    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()
    member_id_required: bool = False
    error: GroupError | None = None
