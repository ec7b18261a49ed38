"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete: the classic group protocol over
``sparklog.broker.coordinators.groups`` and ``sparklog.broker.coordinators.group_offsets``.
Request fields are read by name with the defaults of older versions, so one handler serves
every advertised version."""

from __future__ import annotations

import functools
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.authorization import authorized_operations
from sparklog.broker.context import RequestContext
from sparklog.broker.coordinators.group_offsets import CommitEntry
from sparklog.broker.coordinators.group_state import JoinRequest, JoinResult
from sparklog.broker.errors import error_code
from sparklog.errors import (
    CoordinatorNotAvailableError,
    GroupAuthorizationError,
    GroupError,
    GroupNotFoundError,
    GroupSubscribedToTopicError,
    OffsetCommitStorageError,
    SparkLogError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
    UnknownPartitionError,
    UnknownTopicError,
    UnstableOffsetCommitError,
    UnsupportedCoordinatorTypeError,
)
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT


def _ms(value: Any, default: int) -> int:
    if value is None:
        return default
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


_NO_NODE: dict[str, Any] = {"node_id": -1, "host": "", "port": -1}


def _coordinator(ctx: RequestContext, key: str, key_type: int = 0) -> dict[str, Any]:
    """This broker (embedded), or the leader of the group's ``__consumer_offsets``
    partition - of the transactional id's ``__transaction_state`` partition for key type 1
    (cluster mode; CoordinatorNotAvailableError while it has none)."""
    me = {"node_id": ctx.node_id, "host": ctx.host, "port": ctx.port}
    cluster = ctx.cluster
    if key_type not in (0, 1):
        raise UnsupportedCoordinatorTypeError(f"coordinator key type {key_type} is not served")
    if cluster is None:
        return me
    if key_type == 1:
        from sparklog.broker.coordinators.transactions import TXN_TOPIC, txn_partition

        node = cluster.leader_of(TXN_TOPIC, txn_partition(key))[0]
    else:
        node = cluster.coordinator_of(key)
    if node == ctx.node_id:
        return me
    b = cluster.view.brokers.get(node)
    if b is None:
        raise CoordinatorNotAvailableError(f"group {key!r} has no live coordinator yet")
    host, port = b.address_for(ctx.connection.protocol)
    return {"node_id": b.node_id, "host": host, "port": port}


def _find_one(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    try:
        node = _coordinator(ctx, key, key_type)
    except SparkLogError as e:
        return {"key": key, **_NO_NODE, "error_code": error_code(e), "error_message": str(e)}
    return {"key": key, **node, "error_code": ErrorCode.none, "error_message": None}


async def find_coordinator(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    keys = list(getattr(req, "coordinator_keys", ()) or [getattr(req, "key", "")])
    key_type = int(getattr(req, "key_type", 0))
    found = [_find_one(ctx, k, key_type) for k in keys]
    for entry in found:  # DESCRIBE on the group, or on the transactional id (key type 1)
        rtype = RT.TRANSACTIONAL_ID if key_type == 1 else RT.GROUP
        if not ctx.allowed(Op.DESCRIBE, rtype, entry["key"]):
            denied = TransactionalIdAuthorizationError if key_type == 1 else GroupAuthorizationError
            e = denied(f"{ctx.principal} may not DESCRIBE {entry['key']!r}")
            entry.update(_NO_NODE, error_code=error_code(e), error_message=str(e))
    first = {k: v for k, v in found[0].items() if k != "key"}
    return {"throttle_time": 0, **first, "coordinators": found}


async def join_group(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    session = _ms(req.session_timeout, 10_000)
    join = JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id or "",
        group_instance_id=getattr(req, "group_instance_id", None),
        client_id=getattr(header, "client_id", "") or "",
        client_host=ctx.connection.peer_host,
        session_timeout_ms=session,
        rebalance_timeout_ms=_ms(getattr(req, "rebalance_timeout", None), session),
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        requires_known_member_id=ctx.api_version >= 4,
    )
    try:
        ctx.require(Op.READ, RT.GROUP, req.group_id)
        ctx.check_coordinator(req.group_id)
        result = await ctx.coordinator.join(join)
    except GroupError as e:
        result = JoinResult(req.member_id or "", error=e)
    return _join_response(result)


def _join_response(r: JoinResult) -> dict[str, Any]:
    if r.member_id_required:
        code = ErrorCode.member_id_required
    else:
        code = ErrorCode.none if r.error is None else error_code(r.error)
    members = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
        for m in r.members
    ]
    return {
        "throttle_time": 0,
        "error_code": code,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "leader": r.leader,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": members,
    }


async def sync_group(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        ctx.require(Op.READ, RT.GROUP, req.group_id)
        ctx.check_coordinator(req.group_id)
        assignment, group = await ctx.coordinator.sync(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            int(req.generation_id),
            {a.member_id: bytes(a.assignment) for a in req.assignments},
        )
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "assignment": assignment,
        }
    except GroupError as e:
        return {
            "throttle_time": 0,
            "error_code": error_code(e),
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }


async def heartbeat(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        ctx.require(Op.READ, RT.GROUP, req.group_id)
        ctx.check_coordinator(req.group_id)
        ctx.coordinator.heartbeat(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            int(req.generation_id),
        )
        code = ErrorCode.none
    except GroupError as e:
        code = error_code(e)
    return {"throttle_time": 0, "error_code": code}


async def leave_group(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    coordinator = ctx.coordinator

    def leave(member_id: str, instance_id: str | None) -> ErrorCode:
        try:
            ctx.require(Op.READ, RT.GROUP, req.group_id)
            ctx.check_coordinator(req.group_id)
            coordinator.leave(req.group_id, member_id, instance_id)
            return ErrorCode.none
        except GroupError as e:
            return error_code(e)

    members = getattr(req, "members", None)
    if members is None:
        return {"throttle_time": 0, "error_code": leave(req.member_id, None), "members": []}
    out = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "error_code": leave(m.member_id, m.group_instance_id),
        }
        for m in members
    ]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "members": out}


async def offset_commit(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    generation = int(
        getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1))
    )
    code = ErrorCode.none  # the group's answer, every partition's unless it refuses more
    try:
        ctx.require(Op.READ, RT.GROUP, req.group_id)
        ctx.check_coordinator(req.group_id)
        ctx.coordinator.check_commit(
            req.group_id, req.member_id or "", getattr(req, "group_instance_id", None), generation
        )
    except GroupError as e:
        code = error_code(e)
    topics_out = []
    entries: list[CommitEntry] = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pcode = code
            if pcode == ErrorCode.none:
                try:
                    ctx.require(Op.READ, RT.TOPIC, t.name)
                    _check_partition(ctx, t.name, int(p.partition_index))
                except SparkLogError as e:
                    pcode = error_code(e)
            if pcode == ErrorCode.none:
                entries.append(
                    CommitEntry(
                        t.name,
                        int(p.partition_index),
                        int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", -1)),
                        p.committed_metadata,
                    )
                )
            parts.append({"partition_index": p.partition_index, "error_code": pcode})
        topics_out.append({"name": t.name, "partitions": parts})
    if entries:
        try:
            await ctx.offsets.commit(req.group_id, entries)
        except Exception as e:
            failed = error_code(
                OffsetCommitStorageError(f"group {req.group_id!r}: offsets not committed: {e}")
            )
            for t in topics_out:
                for p in t["partitions"]:
                    if p["error_code"] == ErrorCode.none:
                        p["error_code"] = failed
    return {"throttle_time": 0, "topics": topics_out}


def _check_partition(ctx: RequestContext, topic: str, index: int) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION for a commit to a partition that does not exist (also
    for a topic name that could not exist, as Kafka answers)."""
    try:
        partitions = ctx.manager.topic(topic).partitions
    except (SparkLogError, ValueError) as e:
        raise UnknownTopicError(f"offsets of topic {topic!r} cannot be committed: {e}") from e
    if not 0 <= index < partitions:
        raise UnknownPartitionError(f"{topic}-{index} does not exist ({partitions} partitions)")


def _committed_code(
    ctx: RequestContext, name: str, partition: int, described: bool, unstable: bool
) -> ErrorCode:
    """One committed offset's answer: DESCRIBE on its topic, and (``require_stable``) no
    undecided transactional commit."""
    if not described:
        return error_code(
            TopicAuthorizationError(f"{ctx.principal} may not DESCRIBE topic {name!r}")
        )
    if unstable:
        return error_code(
            UnstableOffsetCommitError(f"{name}-{partition}: a transaction's commit is undecided")
        )
    return ErrorCode.none


def _fetch_group(
    ctx: RequestContext, group_id: str, topics: Any, stable: bool = False
) -> dict[str, Any]:
    """One group's committed offsets. ``stable`` (KIP-447's ``require_stable``, which
    read_committed consumers send): a partition with a transactional commit not yet
    decided is UNSTABLE_OFFSET_COMMIT (retriable) instead of an offset that may change."""
    try:
        ctx.require(Op.DESCRIBE, RT.GROUP, group_id)
        ctx.check_coordinator(group_id)
    except GroupError as e:
        return {"group_id": group_id, "topics": [], "error_code": error_code(e)}
    committed = ctx.offsets.committed(group_id)
    unstable = ctx.offsets.unstable(group_id) if stable else set()
    wanted: list[tuple[str, list[int]]]
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(committed):
            if ctx.allowed(Op.DESCRIBE, RT.TOPIC, t):  # the others are left out
                by_topic.setdefault(t, []).append(p)
        wanted = list(by_topic.items())
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in topics]
    out = []
    for name, parts in wanted:
        rows = []
        described = ctx.allowed(Op.DESCRIBE, RT.TOPIC, name)
        for p in parts:
            c = committed.get((name, p)) if described else None
            rows.append(
                {
                    "partition_index": p,
                    "committed_offset": c.offset if c else -1,
                    "committed_leader_epoch": c.leader_epoch if c else -1,
                    "metadata": c.metadata if c else "",
                    "error_code": _committed_code(ctx, name, p, described, (name, p) in unstable),
                }
            )
        out.append({"name": name, "partitions": rows})
    return {"group_id": group_id, "topics": out, "error_code": ErrorCode.none}


async def offset_fetch(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    groups = getattr(req, "groups", None)
    stable = bool(getattr(req, "require_stable", False))
    if groups is None:
        one = _fetch_group(ctx, req.group_id, req.topics, stable)
        return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}
    return {
        "throttle_time": 0,
        "groups": [_fetch_group(ctx, g.group_id, g.topics, stable) for g in groups],
    }


async def list_groups(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    wanted = set(getattr(req, "states_filter", ()) or ())
    rows = {}
    for gid in ctx.offsets.offsets:
        rows[gid] = {"group_id": gid, "protocol_type": "consumer", "group_state": "Empty"}
    for gid, g in ctx.coordinator.groups.items():
        if not ctx.coordinates(gid):  # cluster mode: a group this broker coordinated once
            continue
        rows[gid] = {
            "group_id": gid,
            "protocol_type": g.protocol_type or "consumer",
            "group_state": g.state.value,
        }
    everything = ctx.allowed(Op.DESCRIBE, RT.CLUSTER)  # else the groups it may describe
    groups = [
        r
        for r in rows.values()
        if (not wanted or r["group_state"] in wanted)
        and (everything or ctx.allowed(Op.DESCRIBE, RT.GROUP, r["group_id"]))
    ]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "groups": sorted(groups, key=lambda r: r["group_id"]),
    }


def _group_op(ctx: RequestContext, group: str, op: int) -> bool:
    return ctx.allowed(Op(op), RT.GROUP, group)


async def describe_groups(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    requested = bool(getattr(req, "include_authorized_operations", False))
    out = []
    for gid in req.groups:
        ops = authorized_operations("group", requested, functools.partial(_group_op, ctx, gid))
        try:
            ctx.require(Op.DESCRIBE, RT.GROUP, gid)
            ctx.check_coordinator(gid)
        except GroupError as e:
            out.append(
                {
                    "error_code": error_code(e),
                    "group_id": gid,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": ops,
                }
            )
            continue
        g = ctx.coordinator.groups.get(gid)
        if g is None:
            state = "Empty" if gid in ctx.offsets.offsets else "Dead"
            out.append(
                {
                    "error_code": ErrorCode.none,
                    "group_id": gid,
                    "group_state": state,
                    "protocol_type": "consumer" if state == "Empty" else "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": ops,
                }
            )
            continue
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata_for(g.protocol_name or ""),
                "member_assignment": m.assignment,
            }
            for m in g.members.values()
        ]
        out.append(
            {
                "error_code": ErrorCode.none,
                "group_id": gid,
                "group_state": g.state.value,
                "protocol_type": g.protocol_type or "",
                "protocol_data": g.protocol_name or "",
                "members": members,
                "authorized_operations": ops,
            }
        )
    return {"throttle_time": 0, "groups": out}


async def delete_groups(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    results = []
    for gid in req.groups_names:
        code = ErrorCode.none
        try:
            ctx.require(Op.DELETE, RT.GROUP, gid)
            ctx.check_coordinator(gid)
            if gid not in ctx.coordinator.groups and gid not in ctx.offsets.offsets:
                raise GroupNotFoundError(f"group {gid!r} has no members and no offsets")
            ctx.coordinator.delete(gid)
            await ctx.offsets.delete_group(gid)
        except GroupError as e:
            code = error_code(e)
        results.append({"group_id": gid, "error_code": code})
    return {"throttle_time": 0, "results": results}


async def offset_delete(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """OffsetDelete (KIP-496): drop a group's committed offsets of some partitions; those
    of topics a live consumer member subscribes to are refused with
    GROUP_SUBSCRIBED_TO_TOPIC, the others are deleted."""
    wanted = [(t.name, int(p.partition_index)) for t in req.topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        ctx.require(Op.DELETE, RT.GROUP, req.group_id)
        ctx.check_coordinator(req.group_id)
        group = ctx.coordinator.groups.get(req.group_id)
        if group is None and req.group_id not in ctx.offsets.offsets:
            raise GroupNotFoundError(f"group {req.group_id!r} has no members and no offsets")
        busy = group.subscribed_topics() if group is not None else set()
        for tp in wanted:
            try:
                ctx.require(Op.READ, RT.TOPIC, tp[0])
                if tp[0] in busy:
                    raise GroupSubscribedToTopicError(
                        f"group {req.group_id!r} has members subscribed to {tp[0]!r}"
                    )
            except SparkLogError as e:
                codes[tp] = error_code(e)
        await ctx.offsets.delete_offsets(req.group_id, [tp for tp in wanted if tp not in codes])
        top = ErrorCode.none
    except GroupError as e:
        top = error_code(e)
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p in wanted:
        code = codes.get((t, p), ErrorCode.none)
        topics.setdefault(t, []).append({"partition_index": p, "error_code": code})
    return {
        "error_code": top,
        "throttle_time": 0,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()] if top == 0 else [],
    }
