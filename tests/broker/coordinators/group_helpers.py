"""What the group coordinator's tests share: a coordinator as the broker builds it (no
initial delay unless asked), JoinGroup requests, a consumer subscription, and a Stable
group of two members."""

from __future__ import annotations

import asyncio
import struct

from sparklog.broker.coordinators.group_state import JoinRequest, State
from sparklog.broker.coordinators.groups import GroupCoordinator

from .helpers import eventually

GROUP = "g"


def subscription(*topics: str) -> bytes:
    """Kafka's ConsumerProtocolSubscription v0: version, then the topics."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)  # no user data


def request(
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    v4: bool = False,
    group: str = GROUP,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        client_id="client",
        client_host="127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=protocol_type,
        protocols=protocols if protocols is not None else [("range", subscription("t"))],
        requires_known_member_id=v4,
    )


def coordinator(**kw: int) -> GroupCoordinator:
    """No initial rebalance delay unless asked: most tests want one member's join to
    complete the rebalance at once."""
    kw.setdefault("initial_rebalance_delay_ms", 0)
    kw.setdefault("min_session_timeout_ms", 10)
    return GroupCoordinator(**kw)


async def stable_pair(c: GroupCoordinator) -> tuple[str, str]:
    """A Stable group of two members at generation 2: (leader, follower)."""
    first = await c.join(request())
    leader = first.member_id
    pending = asyncio.ensure_future(c.join(request()))
    await eventually(lambda: c.groups[GROUP].state == State.PREPARING, "the second join")
    again = asyncio.ensure_future(c.join(request(leader)))
    a, b = await asyncio.gather(again, pending)
    assert a.generation_id == b.generation_id == 2
    follower = b.member_id
    synced = asyncio.ensure_future(c.sync(GROUP, follower, None, 2, {}))
    await c.sync(GROUP, leader, None, 2, {leader: b"L", follower: b"F"})
    assert (await synced)[0] == b"F"
    assert c.groups[GROUP].state == State.STABLE
    return leader, follower


async def waiting_in_sync(c: GroupCoordinator, member_id: str) -> None:
    member = c.groups[GROUP].members[member_id]
    await eventually(lambda: member.sync_future is not None, f"{member_id} in SyncGroup")
