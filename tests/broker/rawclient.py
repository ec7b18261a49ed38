"""A minimal blocking Kafka client for protocol-level broker tests.

It speaks exactly what the test asks for: a request of a given API key and version, built
from plain data with ``wire.build`` (or passed as a kio entity), framed with request header
v1 (v2 for flexible versions), and a response read back and parsed with kio's
``entity_reader``: response header v0 for non-flexible versions and for ApiVersions, v1 for
flexible ones. No version negotiation, retries or metadata: that is the point.

    with RawClient.connect(broker.bootstrap) as c:
        resp = c.request(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                 "producer_id": -1, "producer_epoch": -1})

``record_batch`` builds a magic-2 record batch (optionally idempotent) and ``produce``
sends one batch to one partition and returns that partition's response entry.
"""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Sequence
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from sparklog.broker import wire

PRODUCE = 0
API_VERSIONS = 18
CREATE_TOPICS = 19
INIT_PRODUCER_ID = 22
_SIZE = struct.Struct(">i")


def parse_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a response frame without its size prefix."""
    cls = wire.response_class(api_key, version)
    flexible = cls.__flexible__ and api_key != API_VERSIONS
    header_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
    header, used = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(cls)(frame, used)
    return int(header.correlation_id), body


class RawClient:
    """One blocking TCP connection to a broker. Close it (or use ``with``)."""

    def __init__(self, sock: socket.socket, client_id: str = "rawclient") -> None:
        self.sock = sock
        self.client_id = client_id
        self._correlation = 0

    @classmethod
    def connect(
        cls, bootstrap: str, *, timeout: float = 10.0, client_id: str = "rawclient"
    ) -> RawClient:
        host, _, port = bootstrap.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, client_id)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ framing

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Write one request frame; returns its correlation id. ``body`` is a kio request
        entity or plain data for ``wire.build``."""
        cls = wire.request_class(api_key, version)
        if not isinstance(body, cls):
            body = wire.build(cls, body)
        self._correlation += 1
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        header = header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(self._correlation),
            client_id=self.client_id,
        )
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, header)
        entity_writer(cls)(buf, body)
        data = buf.getbuffer()
        _SIZE.pack_into(data, 0, len(data) - 4)
        self.sock.sendall(data)
        return self._correlation

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self, api_key: int, version: int, correlation_id: int | None = None) -> Any:
        """Read one response frame and parse it as the response of ``api_key``/``version``."""
        (size,) = _SIZE.unpack(self._read_exactly(4))
        correlation, body = parse_response(self._read_exactly(size), api_key, version)
        if correlation_id is not None and correlation != correlation_id:
            raise AssertionError(f"correlation id {correlation}, expected {correlation_id}")
        return body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return its parsed response."""
        correlation = self.send(api_key, version, body)
        return self.receive(api_key, version, correlation)

    # ------------------------------------------------------------------ conveniences

    def init_producer_id(self, version: int = 4) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch."""
        resp = self.request(
            INIT_PRODUCER_ID,
            version,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
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
            CREATE_TOPICS,
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
            PRODUCE,
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
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression_type,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=10**9,
    )
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        ts = timestamps[i] if timestamps is not None else timestamp_ms + i
        builder.append(i, ts, key, value, list(headers[i]) if headers is not None else [])
    return bytes(builder.build())
