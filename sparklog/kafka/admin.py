"""Admin calls over sparklog's own client (``sparklog.kafka.client``): topics, offsets,
consumer groups. The CLI, the Spark source's group commits and the sink use them; each
call raises ``KafkaRequestError`` with the broker's error code when the broker refuses.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from sparklog.errors import KafkaRequestError
from sparklog.kafka.client import KafkaClient
from sparklog.kafka.wire import ApiKey

LATEST, EARLIEST = -1, -2  # ListOffsets' special timestamps
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
#: the broker config that says where it serves /metrics (sparklog's own name; the lag
#: status of ``groups describe`` is read there)
METRICS_URL_CONFIG = "sparklog.metrics.url"
#: answers that mean "ask the group's coordinator" (cluster mode: it is another broker)
_COORDINATOR_MOVED = {
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
}
_RETRY_S = 0.2
T = TypeVar("T")


def _client_for(client: KafkaClient, address: str) -> KafkaClient:
    return KafkaClient(client.settings.with_bootstrap(address))


def at_coordinator(client: KafkaClient, group: str, call: Callable[[KafkaClient], T]) -> T:
    """``call(client)``; when the broker says it does not coordinate ``group`` (a cluster),
    find the coordinator (FindCoordinator) and run ``call`` there, until it answers or the
    client's timeout passes. One broker coordinates everything: no extra request."""
    try:
        return call(client)
    except KafkaRequestError as e:
        if e.code not in _COORDINATOR_MOVED:
            raise
        last = e
    deadline = time.monotonic() + client.settings.timeout_s
    while time.monotonic() < deadline:
        found = client.request(
            ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]}
        ).coordinators[0]
        if found.error_code == ErrorCode.none:
            with _client_for(client, f"{found.host}:{found.port}") as there:
                try:
                    return call(there)
                except KafkaRequestError as e:
                    if e.code not in _COORDINATOR_MOVED:
                        raise
                    last = e
        time.sleep(_RETRY_S)
    raise last


# ---------------------------------------------------------------------------- topics


def _metadata_request(topics: list[str] | None) -> dict[str, Any]:
    return {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }


def list_topics(client: KafkaClient) -> list[str]:
    resp = client.request(ApiKey.METADATA, 12, _metadata_request(None))
    return sorted(t.name for t in resp.topics if t.error_code == ErrorCode.none)


def create_topic(
    client: KafkaClient,
    name: str,
    partitions: int,
    configs: dict[str, str],
    replication_factor: int = -1,
) -> None:
    resp = client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    t = resp.topics[0]
    if t.error_code != ErrorCode.none:
        raise KafkaRequestError(f"create topic {name!r}", t.error_code, t.error_message)


def delete_topic(client: KafkaClient, name: str) -> None:
    resp = client.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": [name], "timeout": 30_000})
    r = resp.responses[0]
    if r.error_code != ErrorCode.none:
        raise KafkaRequestError(f"delete topic {name!r}", r.error_code, r.error_message)


def alter_topic_configs(
    client: KafkaClient, name: str, configs: dict[str, str], delete: list[str]
) -> None:
    """Set ``configs`` and return ``delete``d ones to their defaults (IncrementalAlterConfigs:
    what ``kafka-configs --alter --add-config/--delete-config`` sends)."""
    ops = [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]
    ops += [{"name": k, "config_operation": 1, "value": None} for k in delete]
    resp = client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": ops}],
            "validate_only": False,
        },
    )
    r = resp.responses[0]
    if r.error_code != ErrorCode.none:
        raise KafkaRequestError(f"alter configs of {name!r}", r.error_code, r.error_message)


def list_offsets(
    client: KafkaClient, topic: str, partitions: list[int], timestamp: int
) -> dict[int, tuple[int, int]]:
    """partition -> (offset, timestamp) for ListOffsets ``timestamp`` (-1 latest, -2 earliest)."""
    resp = client.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                        for p in partitions
                    ],
                }
            ],
        },
    )
    out = {}
    for p in resp.topics[0].partitions:
        if p.error_code != ErrorCode.none:
            raise KafkaRequestError(f"list offsets of {topic}-{p.partition_index}", p.error_code)
        out[p.partition_index] = (p.offset, p.timestamp)
    return out


def broker_configs(client: KafkaClient, keys: list[str] | None = None) -> dict[str, str]:
    """The configs (``keys``, None: all) of the broker ``client`` talks to."""
    cfg = client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": BROKER_RESOURCE, "resource_name": "", "configuration_keys": keys}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ).results[0]
    if cfg.error_code != ErrorCode.none:
        raise KafkaRequestError("describe the broker's configs", cfg.error_code)
    return {c.name: c.value for c in cfg.configs if c.value is not None}


def describe_topic(client: KafkaClient, name: str) -> dict[str, Any]:
    md = client.request(ApiKey.METADATA, 12, _metadata_request([name]))
    t = md.topics[0]
    if t.error_code != ErrorCode.none:
        raise KafkaRequestError(f"describe topic {name!r}", t.error_code)
    cfg = client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ).results[0]
    if cfg.error_code != ErrorCode.none:
        raise KafkaRequestError(f"describe configs of {name!r}", cfg.error_code)
    parts = {p.partition_index: p for p in t.partitions}
    starts, ends = _offsets_from_leaders(client, md, name, sorted(parts))
    return {
        "topic": name,
        "topic_id": t.topic_id.hex,
        "partitions": len(parts),
        "configs": {c.name: c.value for c in cfg.configs},
        # what Kafka's kafka-topics --describe lists: not DEFAULT_CONFIG (source 5)
        "non_default_configs": {c.name: c.value for c in cfg.configs if c.config_source != 5},
        "partition_state": [
            {
                "partition": i,
                "leader": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replica_nodes),
                "isr": list(p.isr_nodes),
                "log_start_offset": starts.get(i, (-1, -1))[0],
                "high_watermark": ends.get(i, (-1, -1))[0],
            }
            for i, p in sorted(parts.items())
        ],
    }


def _offsets_from_leaders(
    client: KafkaClient, md: Any, name: str, parts: list[int]
) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """Earliest and latest offsets of ``parts``, each asked of its leader (one broker, or
    the brokers of a cluster: only a partition's leader answers ListOffsets)."""
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    by_leader: dict[int, list[int]] = {}
    for p in md.topics[0].partitions:
        if p.partition_index in parts and p.leader_id >= 0:
            by_leader.setdefault(p.leader_id, []).append(p.partition_index)
    starts: dict[int, tuple[int, int]] = {}
    ends: dict[int, tuple[int, int]] = {}
    for leader, led in by_leader.items():
        if len(brokers) == 1:
            starts |= list_offsets(client, name, led, EARLIEST)
            ends |= list_offsets(client, name, led, LATEST)
            continue
        with _client_for(client, brokers[leader]) as c:
            starts |= list_offsets(c, name, led, EARLIEST)
            ends |= list_offsets(c, name, led, LATEST)
    return starts, ends


def topic_partitions(client: KafkaClient, topic: str) -> list[int]:
    md = client.request(ApiKey.METADATA, 12, _metadata_request([topic]))
    t = md.topics[0]
    if t.error_code != ErrorCode.none:
        raise KafkaRequestError(f"topic {topic!r}", t.error_code)
    return sorted(p.partition_index for p in t.partitions)


def partition_counts(
    client: KafkaClient, topics: list[str], *, auto_create: bool
) -> dict[str, int]:
    """Partitions per topic (a missing topic is created if ``auto_create`` and the broker
    auto-creates topics); KafkaRequestError for a topic that cannot be used."""
    req = _metadata_request(topics)
    req["allow_auto_topic_creation"] = auto_create
    out = {}
    for t in client.request(ApiKey.METADATA, 12, req).topics:
        if t.error_code != ErrorCode.none or not t.partitions:
            code = (
                t.error_code
                if t.error_code != ErrorCode.none
                else ErrorCode.unknown_topic_or_partition
            )
            raise KafkaRequestError(f"topic {t.name!r}", code)
        out[t.name] = len(t.partitions)
    return out


# ---------------------------------------------------------------------------- groups


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """The partitions in a consumer-protocol Assignment (versions 0-3)."""
    out: dict[str, list[int]] = {}
    if len(data) < 6:
        return out
    pos = 2  # version
    (n,) = struct.unpack_from(">i", data, pos)
    pos += 4
    for _ in range(max(n, 0)):
        (tlen,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2 : pos + 2 + tlen].decode()
        pos += 2 + tlen
        (pn,) = struct.unpack_from(">i", data, pos)
        pos += 4
        parts = list(struct.unpack_from(f">{pn}i", data, pos)) if pn > 0 else []
        pos += 4 * max(pn, 0)
        out.setdefault(topic, []).extend(parts)
    return out


def _describe_groups(client: KafkaClient, group: str) -> Any:
    """The DescribeGroups answer for ``group``, from its coordinator."""

    def call(c: KafkaClient) -> Any:
        g = c.request(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
        ).groups[0]
        if g.error_code != ErrorCode.none:
            raise KafkaRequestError(f"describe group {group!r}", g.error_code)
        return g

    return at_coordinator(client, group, call)


def group_state(client: KafkaClient, group: str) -> tuple[str, int]:
    """A group's state and number of members (DescribeGroups)."""
    g = _describe_groups(client, group)
    return g.group_state, len(g.members)


def list_groups(client: KafkaClient) -> list[tuple[str, str]]:
    """Every group of the cluster: each broker lists the groups it coordinates, so every
    live broker of the metadata is asked."""
    md = client.request(ApiKey.METADATA, 12, _metadata_request([]))
    found: dict[str, str] = {}
    for b in md.brokers if len(md.brokers) > 1 else []:
        with _client_for(client, f"{b.host}:{b.port}") as c:
            resp = c.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
            found |= {g.group_id: g.group_state for g in resp.groups}
    if len(md.brokers) <= 1:
        resp = client.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        found = {g.group_id: g.group_state for g in resp.groups}
    return sorted(found.items())


def committed_offsets(client: KafkaClient, group: str) -> dict[tuple[str, int], int]:
    def call(c: KafkaClient) -> Any:
        resp = c.request(
            ApiKey.OFFSET_FETCH,
            8,
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
        )
        g = resp.groups[0]
        if g.error_code != ErrorCode.none:
            raise KafkaRequestError(f"committed offsets of {group!r}", g.error_code)
        return g

    g = at_coordinator(client, group, call)
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in g.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def record_timestamp(client: KafkaClient, topic: str, partition: int, offset: int) -> int | None:
    """The timestamp of the first record at or after ``offset`` (a one-record fetch)."""
    from aiokafka.record.default_records import DefaultRecordBatch

    resp = client.request(
        ApiKey.FETCH,
        12,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    data = resp.responses[0].partitions[0].records
    if not data:
        return None
    (length,) = struct.unpack_from(">i", data, 8)
    batch = DefaultRecordBatch(bytes(data[: 12 + length]))
    for record in batch:
        if record.offset >= offset:
            return int(record.timestamp)
    return None


def describe_group(client: KafkaClient, group: str, now_ms: int) -> dict[str, Any]:
    """Members, and per partition: owner, committed offset, log end, lag in records and in
    seconds (the age of the oldest unconsumed record)."""
    g = _describe_groups(client, group)
    if g.group_state == "Dead":  # no members and no committed offsets: no such group
        raise KafkaRequestError(
            f"describe group {group!r}", ErrorCode.group_id_not_found, "no such group"
        )
    owners: dict[tuple[str, int], str] = {}
    for m in g.members:
        for topic, parts in decode_assignment(bytes(m.member_assignment)).items():
            for p in parts:
                owners[(topic, p)] = m.member_id
    committed = committed_offsets(client, group)
    keys = sorted(set(committed) | set(owners))
    rows = []
    for topic in sorted({t for t, _ in keys}):
        parts = [p for t, p in keys if t == topic]
        md = client.request(ApiKey.METADATA, 12, _metadata_request([topic]))
        starts, ends = _offsets_from_leaders(client, md, topic, parts)
        for p in parts:
            end = ends[p][0]
            pos = committed.get((topic, p))
            lag = end - (pos if pos is not None else starts[p][0])
            lag_s = None
            if lag > 0:
                ts = record_timestamp(client, topic, p, pos if pos is not None else starts[p][0])
                if ts is not None:
                    lag_s = max(now_ms - ts, 0) / 1000
            elif lag == 0:
                lag_s = 0.0
            rows.append(
                {
                    "topic": topic,
                    "partition": p,
                    "owner": owners.get((topic, p)),
                    "committed_offset": pos,
                    "log_end_offset": end,
                    "lag": lag,
                    "lag_seconds": lag_s,
                }
            )
    return {
        "group": group,
        "state": g.group_state,
        "protocol": g.protocol_data,
        "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host}
            for m in g.members
        ],
        "partitions": rows,
    }


def commit_offsets(client: KafkaClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit as a standalone client (generation -1): only while the group has no members;
    at the group's coordinator."""
    at_coordinator(client, group, lambda c: _commit_offsets(c, group, offsets))


def _commit_offsets(client: KafkaClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, []).append((p, o))
    resp = client.request(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": o,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for p, o in parts
                    ],
                }
                for t, parts in by_topic.items()
            ],
        },
    )
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                hint = (
                    "; the group has active members: stop its consumers first"
                    if p.error_code == ErrorCode.unknown_member_id
                    else ""
                )
                raise KafkaRequestError(
                    f"commit offset of {group!r} for {t.name}-{p.partition_index}",
                    p.error_code,
                    hint.lstrip("; ") or None,
                )


def delete_group(client: KafkaClient, group: str) -> None:
    def call(c: KafkaClient) -> None:
        r = c.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]}).results[0]
        if r.error_code != ErrorCode.none:
            raise KafkaRequestError(f"delete group {group!r}", r.error_code)

    at_coordinator(client, group, call)


# ---------------------------------------------------------------------------- producers


def init_producer_id(client: KafkaClient) -> tuple[int, int]:
    """A new idempotent producer id and its epoch (InitProducerId without a transaction)."""
    resp = client.request(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    if resp.error_code != ErrorCode.none:
        raise KafkaRequestError("init producer id", resp.error_code)
    return int(resp.producer_id), int(resp.producer_epoch)
