"""A minimal synchronous Kafka client over kio, for sparklog's own tools.

One TCP connection, one request at a time; enough for the CLI's admin calls (and, later,
group offset commits from Spark). Applications use real Kafka clients instead.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from sparklog.broker import wire
from sparklog.broker.config import parse_listen
from sparklog.errors import SparkLogError


class KafkaRequestError(SparkLogError):
    """A broker answered a request with an error code."""

    def __init__(self, what: str, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(f"{what}: {code.name.upper()}" + (f" ({message})" if message else ""))
        self.code = code


class KafkaClient:
    """See the module docstring. Use as a context manager."""

    def __init__(
        self, bootstrap: str, *, timeout_s: float = 30.0, client_id: str = "sparklog"
    ) -> None:
        host, port = parse_listen(bootstrap.split(",")[0].strip())
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise SparkLogError(f"cannot connect to a broker at {host}:{port}: {e}") from e
        self._correlation = 0
        self.client_id = client_id

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self._sock.recv(n - got)
            if not chunk:
                raise SparkLogError("the broker closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request (plain data, fitted by ``wire.build``) and return the response."""
        self._correlation += 1
        cls = wire.request_class(api_key, version)
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        buf = io.BytesIO()
        header = header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(self._correlation),
            client_id=self.client_id,
        )
        entity_writer(header_cls)(buf, header)
        entity_writer(cls)(buf, wire.build(cls, body))
        data = buf.getvalue()
        self._sock.sendall(struct.pack(">i", len(data)) + data)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        frame = self._recv_exact(size)
        resp_cls = wire.response_class(api_key, version)
        flexible = resp_cls.__flexible__ and api_key != wire.API_VERSIONS_KEY
        rh_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
        rheader: Any
        rheader, used = entity_reader(rh_cls)(frame, 0)
        if rheader.correlation_id != self._correlation:
            raise SparkLogError(
                f"response correlation id {rheader.correlation_id}, expected {self._correlation}"
            )
        response, _ = entity_reader(resp_cls)(frame, used)
        return response


# ---------------------------------------------------------------------------- admin calls

METADATA, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, LIST_OFFSETS = 3, 19, 20, 32, 2


def _metadata_request(topics: list[str] | None) -> dict[str, Any]:
    return {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }


def list_topics(client: KafkaClient) -> list[str]:
    resp = client.request(METADATA, 12, _metadata_request(None))
    return sorted(t.name for t in resp.topics if t.error_code == ErrorCode.none)


def create_topic(client: KafkaClient, name: str, partitions: int, configs: dict[str, str]) -> None:
    resp = client.request(
        CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": -1,
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
    resp = client.request(DELETE_TOPICS, 5, {"topic_names": [name], "timeout": 30_000})
    r = resp.responses[0]
    if r.error_code != ErrorCode.none:
        raise KafkaRequestError(f"delete topic {name!r}", r.error_code, r.error_message)


def describe_topic(client: KafkaClient, name: str) -> dict[str, Any]:
    md = client.request(METADATA, 12, _metadata_request([name]))
    t = md.topics[0]
    if t.error_code != ErrorCode.none:
        raise KafkaRequestError(f"describe topic {name!r}", t.error_code)
    cfg = client.request(
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ).results[0]
    if cfg.error_code != ErrorCode.none:
        raise KafkaRequestError(f"describe configs of {name!r}", cfg.error_code)
    parts = sorted(p.partition_index for p in t.partitions)
    ends = {}
    for ts in (-2, -1):
        resp = client.request(
            LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
                            for p in parts
                        ],
                    }
                ],
            },
        )
        ends[ts] = {p.partition_index: p.offset for p in resp.topics[0].partitions}
    return {
        "topic": name,
        "topic_id": t.topic_id.hex,
        "partitions": len(parts),
        "configs": {c.name: c.value for c in cfg.configs},
        "partition_state": [
            {
                "partition": p,
                "leader": next(x.leader_id for x in t.partitions if x.partition_index == p),
                "log_start_offset": ends[-2][p],
                "high_watermark": ends[-1][p],
            }
            for p in parts
        ],
    }


# ---------------------------------------------------------------------------- groups

OFFSET_COMMIT, OFFSET_FETCH, FETCH, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = (
    8, 9, 1, 15, 16, 42,
)  # fmt: skip


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


def list_groups(client: KafkaClient) -> list[tuple[str, str]]:
    resp = client.request(LIST_GROUPS, 4, {"states_filter": []})
    return [(g.group_id, g.group_state) for g in resp.groups]


def committed_offsets(client: KafkaClient, group: str) -> dict[tuple[str, int], int]:
    resp = client.request(
        OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
    )
    g = resp.groups[0]
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in g.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def list_offsets(
    client: KafkaClient, topic: str, partitions: list[int], timestamp: int
) -> dict[int, tuple[int, int]]:
    """partition -> (offset, timestamp) for ListOffsets ``timestamp`` (-1 latest, -2 earliest)."""
    resp = client.request(
        LIST_OFFSETS,
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


def record_timestamp(client: KafkaClient, topic: str, partition: int, offset: int) -> int | None:
    """The timestamp of the first record at or after ``offset`` (a one-record fetch)."""
    from aiokafka.record.default_records import DefaultRecordBatch

    resp = client.request(
        FETCH,
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
    g = client.request(
        DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
    ).groups[0]
    if g.error_code != ErrorCode.none:
        raise KafkaRequestError(f"describe group {group!r}", g.error_code)
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
        ends = list_offsets(client, topic, parts, -1)
        starts = list_offsets(client, topic, parts, -2)
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
    """Commit as a standalone client (generation -1): only while the group has no members."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, []).append((p, o))
    resp = client.request(
        OFFSET_COMMIT,
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
    r = client.request(DELETE_GROUPS, 2, {"groups_names": [group]}).results[0]
    if r.error_code != ErrorCode.none:
        raise KafkaRequestError(f"delete group {group!r}", r.error_code)


def topic_partitions(client: KafkaClient, topic: str) -> list[int]:
    md = client.request(METADATA, 12, _metadata_request([topic]))
    t = md.topics[0]
    if t.error_code != ErrorCode.none:
        raise KafkaRequestError(f"topic {topic!r}", t.error_code)
    return sorted(p.partition_index for p in t.partitions)
