"""Metadata: the brokers, and every topic's partitions with their leader."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.authorization import NOT_REQUESTED, authorized_operations
from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.broker.replicas import in_sync, reported
from sparklog.errors import FrameError, SparkLogError
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT


def _cluster_partition(ctx: RequestContext, name: str, p: int) -> dict[str, Any]:
    """A partition as the cluster view says: its leader (-1 and LEADER_NOT_AVAILABLE while
    it has no live one), leader epoch, and its replicas and ISR as ``broker.replicas``
    reports them (on a single local copy: the assigned leader alone)."""
    cluster = ctx.cluster
    assert cluster is not None
    a = cluster.view.assignments.get((name, p))
    live = cluster.view.brokers
    if a is None or not cluster.view_fresh:
        leader, epoch, replicas = -1, -1, []
    else:
        leader = a.leader if a.leader in live else -1
        redundant = ctx.manager.storage.fs.redundant
        epoch, replicas = a.leader_epoch, reported(a.leader, a.replicas, redundant=redundant)
    return {
        # the partition's state as the cluster view reports it, not a refusal of the request
        "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
        "partition_index": p,
        "leader_id": leader,
        "leader_epoch": epoch,
        "replica_nodes": replicas,
        "isr_nodes": in_sync(replicas, live),
        "offline_replicas": [r for r in replicas if r not in live],
    }


def _brokers(ctx: RequestContext) -> list[dict[str, Any]]:
    """Every live broker; this one with the address of the listener the client used."""
    me: dict[str, Any] = {"node_id": ctx.node_id, "host": ctx.host, "port": ctx.port, "rack": None}
    if ctx.cluster is None:
        return [me]
    proto = ctx.connection.protocol
    out = {}
    for b in ctx.cluster.view.brokers.values():
        host, port = b.address_for(proto)
        out[b.node_id] = {"node_id": b.node_id, "host": host, "port": port, "rack": b.rack}
    out[ctx.node_id] = {**me, "rack": ctx.cluster.rack}
    return [out[n] for n in sorted(out)]


def _topic_entry(ctx: RequestContext, name: str, with_ops: bool = False) -> dict[str, Any]:
    meta = ctx.manager.topic(name)
    partitions = []
    for p in range(meta.partitions):
        if ctx.cluster is not None:
            partitions.append(_cluster_partition(ctx, name, p))
            continue
        # describing a partition must not open its log (file descriptors, epoch bump):
        # an unopened partition's epoch is unknown (-1) until a produce or fetch opens it
        handle = ctx.manager.handles.get((name, p))
        partitions.append(
            {
                "error_code": ErrorCode.none,
                "partition_index": p,
                "leader_id": ctx.node_id,
                "leader_epoch": handle.leader_epoch if handle is not None else -1,
                "replica_nodes": [ctx.node_id],
                "isr_nodes": [ctx.node_id],
                "offline_replicas": [],
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": uuid.UUID(meta.topic_id),
        "is_internal": name.startswith("__"),
        "partitions": partitions,
        "topic_authorized_operations": authorized_operations(
            "topic", with_ops, lambda op: ctx.allowed(Op(op), RT.TOPIC, name)
        ),
    }


def _controller(ctx: RequestContext) -> int:
    """The controller, as clients see it: they send it admin requests (CreateTopics,
    DeleteTopics...), which every sparklog broker serves. While this broker's view knows of
    none (starting, or between two controllers), it names itself, as a KRaft broker names
    any live broker: a client told "no controller" waits for its next metadata refresh."""
    if ctx.cluster is None:
        return ctx.node_id
    ctl = ctx.cluster.view.controller
    return ctl.node_id if ctl is not None else ctx.node_id


async def describe_cluster(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """The live brokers and the controller (what Kafka's Java AdminClient asks)."""
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": ctx.cluster_id,
        "controller_id": _controller(ctx),
        "brokers": [
            {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
            for b in _brokers(ctx)
        ],
        "cluster_authorized_operations": _cluster_ops(ctx, req),
    }


def _cluster_ops(ctx: RequestContext, req: Any) -> int:
    return authorized_operations(
        "cluster",
        bool(getattr(req, "include_cluster_authorized_operations", False)),
        lambda op: ctx.allowed(Op(op), RT.CLUSTER),
    )


async def metadata(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    if ctx.cluster is not None and not ctx.cluster.view_fresh:
        # cut off from etcd for longer than a lease: what this broker knows of leaders is
        # stale, and a client asking it again and again would never learn the new ones.
        # Closing the connection makes the client ask another broker.
        raise FrameError(f"broker {ctx.node_id} cannot reach etcd: no current metadata")
    allow_auto = bool(getattr(req, "allow_auto_topic_creation", True))
    with_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    everything = req.topics is None
    # internal topics (__consumer_offsets) are listed only when asked for by name
    if everything:  # only what the principal may DESCRIBE is listed
        wanted = sorted(
            n
            for n in ctx.manager.topics()
            if not n.startswith("__") and ctx.allowed(Op.DESCRIBE, RT.TOPIC, n)
        )
    else:  # named topics only: no listing of storage
        wanted = [t.name for t in req.topics]
    topics = []
    for name in wanted:
        try:
            if not everything:
                ctx.require(Op.DESCRIBE, RT.TOPIC, name)
            if allow_auto and req.topics is not None:
                ctx.auto_create(name)
            topics.append(_topic_entry(ctx, name, with_ops))
        except (SparkLogError, ValueError) as e:
            topics.append(
                {
                    "error_code": error_code(e),
                    "name": name,
                    "topic_id": uuid.UUID(int=0),
                    "is_internal": False,
                    "partitions": [],
                    "topic_authorized_operations": NOT_REQUESTED,
                }
            )
    return {
        "throttle_time": 0,
        "brokers": _brokers(ctx),
        "cluster_id": ctx.cluster_id,
        "controller_id": _controller(ctx),
        "topics": topics,
        "cluster_authorized_operations": _cluster_ops(ctx, req),
    }
