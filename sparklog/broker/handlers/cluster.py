"""Metadata: the brokers, and every topic's partitions with their leader."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.errors import SparkLogError, UnknownTopicError


def _topic_entry(ctx: RequestContext, name: str) -> dict[str, Any]:
    meta = ctx.manager.topic(name)
    partitions = []
    for p in range(meta.partitions):
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
        "topic_authorized_operations": -2147483648,
    }


async def metadata(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    allow_auto = bool(getattr(req, "allow_auto_topic_creation", True))
    everything = req.topics is None
    # internal topics (__consumer_offsets) are listed only when asked for by name
    listed = sorted(n for n in ctx.manager.topics() if not n.startswith("__"))
    wanted = listed if everything else [t.name for t in req.topics]
    topics = []
    for name in wanted:
        try:
            if allow_auto and req.topics is not None:
                ctx.manager.auto_create(name)
            topics.append(_topic_entry(ctx, name))
        except (SparkLogError, ValueError) as e:
            code = error_code(e)
            if isinstance(e, UnknownTopicError):
                code = ErrorCode.unknown_topic_or_partition
            topics.append(
                {
                    "error_code": code,
                    "name": name,
                    "topic_id": uuid.UUID(int=0),
                    "is_internal": False,
                    "partitions": [],
                    "topic_authorized_operations": -2147483648,
                }
            )
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": ctx.node_id, "host": ctx.host, "port": ctx.port, "rack": None}],
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.node_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }
