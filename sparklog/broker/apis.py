"""The Kafka APIs this broker implements, the versions it advertises, and their handlers.

Ranges are those current clients negotiate and that the handlers implement in full:
Produce stops at v9 and Fetch at v12 because v13+ name topics by id only. ApiVersions is
answered here, from the table itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.handlers import (
    admin,
    cluster,
    fetch,
    groups,
    offsets,
    produce,
    security,
    txn,
)
from sparklog.kafka.wire import ApiKey

Handler = Callable[[RequestContext, Any, Any], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class Api:
    name: str
    min_version: int
    max_version: int
    handler: Handler


def api_versions(error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    """The ApiVersions response: every API of ``APIS`` with its version range."""
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": key, "min_version": api.min_version, "max_version": api.max_version}
            for key, api in sorted(APIS.items())
        ],
        "throttle_time": 0,
    }


async def _api_versions(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    name = getattr(req, "client_software_name", None)
    if name:
        ctx.connection.client_software = (name, getattr(req, "client_software_version", ""))
    return api_versions()


APIS: dict[int, Api] = {
    ApiKey.PRODUCE: Api("Produce", 3, 9, produce.produce),
    ApiKey.FETCH: Api("Fetch", 4, 12, fetch.fetch),
    ApiKey.LIST_OFFSETS: Api("ListOffsets", 1, 7, offsets.list_offsets),
    ApiKey.METADATA: Api("Metadata", 1, 12, cluster.metadata),
    ApiKey.OFFSET_COMMIT: Api("OffsetCommit", 2, 8, groups.offset_commit),
    ApiKey.OFFSET_FETCH: Api("OffsetFetch", 1, 8, groups.offset_fetch),
    ApiKey.FIND_COORDINATOR: Api("FindCoordinator", 0, 4, groups.find_coordinator),
    ApiKey.JOIN_GROUP: Api("JoinGroup", 0, 9, groups.join_group),
    ApiKey.HEARTBEAT: Api("Heartbeat", 0, 4, groups.heartbeat),
    ApiKey.LEAVE_GROUP: Api("LeaveGroup", 0, 5, groups.leave_group),
    ApiKey.SYNC_GROUP: Api("SyncGroup", 0, 5, groups.sync_group),
    ApiKey.DESCRIBE_GROUPS: Api("DescribeGroups", 0, 5, groups.describe_groups),
    ApiKey.LIST_GROUPS: Api("ListGroups", 0, 4, groups.list_groups),
    ApiKey.API_VERSIONS: Api("ApiVersions", 0, 3, _api_versions),
    ApiKey.CREATE_TOPICS: Api("CreateTopics", 2, 7, admin.create_topics),
    ApiKey.DELETE_TOPICS: Api("DeleteTopics", 1, 5, admin.delete_topics),
    ApiKey.DELETE_RECORDS: Api("DeleteRecords", 0, 2, offsets.delete_records),
    ApiKey.INIT_PRODUCER_ID: Api("InitProducerId", 0, 5, txn.init_producer_id),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Api(
        "OffsetForLeaderEpoch", 2, 4, offsets.offset_for_leader_epoch
    ),
    ApiKey.DESCRIBE_CONFIGS: Api("DescribeConfigs", 1, 4, admin.describe_configs),
    ApiKey.ALTER_CONFIGS: Api("AlterConfigs", 0, 2, admin.alter_configs),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Api(
        "IncrementalAlterConfigs", 0, 1, admin.incremental_alter_configs
    ),
    ApiKey.CREATE_PARTITIONS: Api("CreatePartitions", 0, 3, admin.create_partitions),
    ApiKey.DELETE_GROUPS: Api("DeleteGroups", 0, 2, groups.delete_groups),
    ApiKey.OFFSET_DELETE: Api("OffsetDelete", 0, 0, groups.offset_delete),
    ApiKey.DESCRIBE_CLUSTER: Api("DescribeCluster", 0, 1, cluster.describe_cluster),
    ApiKey.ADD_PARTITIONS_TO_TXN: Api("AddPartitionsToTxn", 0, 3, txn.add_partitions_to_txn),
    ApiKey.ADD_OFFSETS_TO_TXN: Api("AddOffsetsToTxn", 0, 4, txn.add_offsets_to_txn),
    ApiKey.END_TXN: Api("EndTxn", 0, 4, txn.end_txn),
    ApiKey.WRITE_TXN_MARKERS: Api("WriteTxnMarkers", 1, 1, txn.write_txn_markers),
    ApiKey.TXN_OFFSET_COMMIT: Api("TxnOffsetCommit", 0, 4, txn.txn_offset_commit),
    ApiKey.DESCRIBE_PRODUCERS: Api("DescribeProducers", 0, 0, txn.describe_producers),
    ApiKey.DESCRIBE_TRANSACTIONS: Api("DescribeTransactions", 0, 0, txn.describe_transactions),
    ApiKey.LIST_TRANSACTIONS: Api("ListTransactions", 0, 1, txn.list_transactions),
    ApiKey.SASL_HANDSHAKE: Api("SaslHandshake", 0, 1, security.sasl_handshake),
    ApiKey.SASL_AUTHENTICATE: Api("SaslAuthenticate", 0, 2, security.sasl_authenticate),
    ApiKey.DESCRIBE_ACLS: Api("DescribeAcls", 1, 3, security.describe_acls),
    ApiKey.CREATE_ACLS: Api("CreateAcls", 1, 3, security.create_acls),
    ApiKey.DELETE_ACLS: Api("DeleteAcls", 1, 3, security.delete_acls),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Api(
        "DescribeClientQuotas", 0, 1, security.describe_client_quotas
    ),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Api(
        "DescribeUserScramCredentials", 0, 0, security.describe_user_scram_credentials
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Api(
        "AlterUserScramCredentials", 0, 0, security.alter_user_scram_credentials
    ),
}
