"""The Kafka APIs this broker implements, the versions it advertises, and their handlers.

Ranges are those current clients negotiate and that the handlers implement in full:
Produce stops at v9 and Fetch at v12 because v13+ name topics by id only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sparklog.broker.handlers import (
    RequestContext,
    admin,
    cluster,
    fetch,
    groups,
    offsets,
    produce,
)

Handler = Callable[[RequestContext, Any, Any], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class Api:
    name: str
    min_version: int
    max_version: int
    handler: Handler


APIS: dict[int, Api] = {
    0: Api("Produce", 3, 9, produce.produce),
    1: Api("Fetch", 4, 12, fetch.fetch),
    2: Api("ListOffsets", 1, 7, offsets.list_offsets),
    3: Api("Metadata", 1, 12, cluster.metadata),
    8: Api("OffsetCommit", 2, 8, groups.offset_commit),
    9: Api("OffsetFetch", 1, 8, groups.offset_fetch),
    10: Api("FindCoordinator", 0, 4, groups.find_coordinator),
    11: Api("JoinGroup", 0, 9, groups.join_group),
    12: Api("Heartbeat", 0, 4, groups.heartbeat),
    13: Api("LeaveGroup", 0, 5, groups.leave_group),
    14: Api("SyncGroup", 0, 5, groups.sync_group),
    15: Api("DescribeGroups", 0, 5, groups.describe_groups),
    16: Api("ListGroups", 0, 4, groups.list_groups),
    18: Api("ApiVersions", 0, 3, cluster.api_versions),
    19: Api("CreateTopics", 2, 7, admin.create_topics),
    20: Api("DeleteTopics", 1, 5, admin.delete_topics),
    21: Api("DeleteRecords", 0, 2, offsets.delete_records),
    22: Api("InitProducerId", 0, 4, admin.init_producer_id),
    32: Api("DescribeConfigs", 1, 4, admin.describe_configs),
    37: Api("CreatePartitions", 0, 3, admin.create_partitions),
    42: Api("DeleteGroups", 0, 2, groups.delete_groups),
}
