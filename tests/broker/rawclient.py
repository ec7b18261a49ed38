"""Protocol-level conveniences over sparklog's own Kafka client, for broker tests.

``RawClient`` is ``sparklog.kafka.client.KafkaClient`` (one blocking connection, a request
of exactly the API key and version a test asks for, no negotiation, retries or metadata:
that is the point) plus three calls that return the broker's raw response entries, error
codes included, where the admin calls of ``sparklog.kafka.admin`` would raise:

    with RawClient.connect(broker.bootstrap) as c:
        pid, epoch = c.init_producer_id()
        c.produce("t", 0, record_batch([b"v"], producer_id=pid, ...))

``record_batch`` builds a magic-2 record batch (optionally idempotent) with the codec of
``sparklog.kafka.records``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparklog.kafka import admin, wire
from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog.kafka.records import build_batch
from sparklog.kafka.wire import ApiKey


def parse_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a response frame without its size prefix."""
    return wire.decode_response(api_key, version, frame)


class RawClient(KafkaClient):
    """See the module docstring."""

    @classmethod
    def connect(
        cls, bootstrap: str, *, timeout: float = 10.0, client_id: str = "rawclient"
    ) -> RawClient:
        return cls(ClientSettings(bootstrap, timeout, client_id))

    def __enter__(self) -> RawClient:
        return self

    def init_producer_id(self, version: int = 4) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch."""
        if version == 4:
            return admin.init_producer_id(self)
        resp = self.request(
            ApiKey.INIT_PRODUCER_ID,
            version,
            {"transactional_id": None, "transaction_timeout": 60_000,
             "producer_id": -1, "producer_epoch": -1},
        )  # fmt: skip
        assert int(resp.error_code) == 0, resp
        return int(resp.producer_id), int(resp.producer_epoch)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: dict[str, str] | None = None,
        *,
        version: int = 7,
    ) -> Any:
        """Create one topic; returns its result entry (check ``error_code``)."""
        resp = self.request(
            ApiKey.CREATE_TOPICS,
            version,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                    }
                ],
                "timeout": 10_000,
                "validate_only": False,
            },
        )
        (result,) = resp.topics
        return result

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes,
        *,
        acks: int = -1,
        version: int = 9,
        timeout_ms: int = 10_000,
    ) -> Any:
        """Produce one record batch to one partition; the partition's response entry."""
        resp = self.request(
            ApiKey.PRODUCE,
            version,
            {
                "transactional_id": None,
                "acks": acks,
                "timeout": timeout_ms,
                "topic_data": [
                    {
                        "name": topic,
                        "partition_data": [{"index": partition, "records": records}],
                    }
                ],
            },
        )
        (topic_resp,) = resp.responses
        (part,) = topic_resp.partition_responses
        return part


def record_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
    timestamps: Sequence[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int = 1_700_000_000_000,
    compression_type: int = 0,
) -> bytes:
    """A magic-2 record batch (base offset 0) of ``values``: record ``i`` gets ``keys[i]``,
    ``headers[i]`` and ``timestamps[i]`` (default ``timestamp_ms + i``)."""
    return build_batch(
        (
            (
                i,
                timestamps[i] if timestamps is not None else timestamp_ms + i,
                keys[i] if keys is not None else None,
                value,
                list(headers[i]) if headers is not None else [],
            )
            for i, value in enumerate(values)
        ),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        codec=compression_type,
    )


def fetch_partition0(bootstrap: str, topic: str) -> Any:
    """The response partition of a raw Fetch v12 of ``topic``'s partition 0 from offset 0
    (its ``error_code`` and ``records``)."""
    with KafkaClient(bootstrap) as c:
        r = c.request(wire.ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": topic, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        })  # fmt: skip
    (part,) = r.responses[0].partitions
    return part
