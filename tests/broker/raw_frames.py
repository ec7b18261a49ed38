"""Hand-made Kafka frames and record batches for robustness tests (no client library).

Well-formed requests and responses go through ``sparklog.kafka.wire`` (``encode_request`` /
``decode_response``) and valid record batches through ``sparklog.kafka.records``; what a
test needs malformed stays raw here: frames with a lying size prefix or only a header
(``sized``, ``head_only``, ``header_bytes``), batches assembled byte by byte (``raw_batch``,
a decompression bomb), and a bare socket (``RawConnection``) that sends any bytes and
tells whether the broker answered or closed. Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import socket
import struct
import time
import zlib
from typing import Any

import cramjam
import crc32c

from sparklog.broker.apis import APIS
from sparklog.kafka import wire
from sparklog.kafka.records import build_batch

HOST = "127.0.0.1"
PRODUCE, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 3, 18, 19
BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")  # record batch v2 header, 61 bytes
CRC_START = 21


# ---------------------------------------------------------------------------- requests


def request_payload(
    api_key: int,
    version: int,
    body: dict[str, Any],
    *,
    correlation_id: int = 1,
    client_id: str | None = "raw-frames",
) -> bytes:
    """Request header + body, without the size prefix."""
    return wire.encode_request(api_key, version, correlation_id, body, client_id=client_id)[4:]


def sized(payload: bytes, declared: int | None = None) -> bytes:
    """``payload`` behind an int32 size prefix (``declared`` overrides the real size)."""
    return struct.pack(">i", len(payload) if declared is None else declared) + payload


def request(api_key: int, version: int, body: dict[str, Any], **kw: Any) -> bytes:
    """A whole request frame, size prefix included."""
    return sized(request_payload(api_key, version, body, **kw))


def head_only(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    """A frame holding only a v1 request header (enough for key/version checks)."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1)
    return sized(payload)


def header_bytes(key: int, version: int, correlation_id: int = 1, client: bytes = b"raw") -> bytes:
    """A request header as the broker expects it for ``key`` v``version`` (v2, with an
    empty tagged-field section, for flexible versions; v1 otherwise)."""
    head = struct.pack(">hhih", key, version, correlation_id, len(client)) + client
    return head + b"\x00" if wire.request_class(key, version).__flexible__ else head


def parse_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response body) of a response frame without its size prefix."""
    return wire.decode_response(api_key, version, frame)


def produce_body(
    topic: str, partition: int, records: bytes | None, *, acks: int = -1, timeout_ms: int = 5000
) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": timeout_ms,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def api_versions_body(version: int) -> dict[str, Any]:
    if version >= 3:
        return {"client_software_name": "raw-frames", "client_software_version": "1.0"}
    return {}


# ---------------------------------------------------------------------------- connection


class RawConnection:
    """One TCP connection to the broker; bytes in, frames out."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, n: int, deadline: float) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(min(n - got, 1 << 20))
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def recv_frame(self, timeout: float = 10.0) -> bytes | None:
        """The next response frame (without size), or None if the broker closed first.
        Raises TimeoutError when nothing complete arrives within ``timeout``."""
        deadline = time.monotonic() + timeout
        head = self._recv_exactly(4, deadline)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exactly(size, deadline)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection (EOF or reset) within ``timeout``
        without sending anything; False on timeout. Data arriving is an AssertionError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            if not data:
                return True
            raise AssertionError(f"expected the connection to close, got {data[:64]!r}")
        return False

    def roundtrip(
        self, api_key: int, version: int, body: dict[str, Any], correlation_id: int = 7
    ) -> Any:
        self.send(request(api_key, version, body, correlation_id=correlation_id))
        frame = self.recv_frame()
        assert frame is not None, f"broker closed the connection on api {api_key} v{version}"
        corr, response = parse_response(api_key, version, frame)
        assert corr == correlation_id
        return response


def check_api_versions(port: int, version: int = 3) -> None:
    """A well-formed ApiVersions request on a new connection gets the full, correct list."""
    with RawConnection(port) as conn:
        resp = conn.roundtrip(API_VERSIONS, version, api_versions_body(version))
    assert int(resp.error_code) == 0, resp.error_code
    got = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    assert got == {k: (a.min_version, a.max_version) for k, a in APIS.items()}


# ---------------------------------------------------------------------------- batches


def record_batch(
    values: list[bytes],
    *,
    codec: int = 0,
    key: bytes | None = b"k",
    magic: int = 2,
    timestamp_ms: int | None = None,
) -> bytes:
    """A valid record batch of ``values`` built by aiokafka (magic 2 unless told)."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    if magic != 2:
        from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

        legacy = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=10**9)
        for i, v in enumerate(values):
            legacy.append(i, ts if magic else None, key, v)
        return bytes(legacy.build())
    return build_batch(((i, ts, key, v, []) for i, v in enumerate(values)), codec=codec)


def set_crc(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC-32C recomputed (after editing covered bytes)."""
    data = bytearray(batch)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[CRC_START:])))
    return bytes(data)


def raw_batch(
    payload: bytes,
    *,
    codec: int = 0,
    count: int = 1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A magic-2 batch header (valid CRC) in front of ``payload`` (the records, maybe
    compressed) - whatever the payload holds."""
    header = BATCH_HEADER.pack(
        0,
        BATCH_HEADER.size - 12 + len(payload),
        -1,
        2,
        0,
        codec,
        count - 1,
        0,
        0,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    return set_crc(header + payload)


def zigzag(n: int) -> bytes:
    """Kafka's zigzag varint (varlong) encoding of ``n``."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if not u:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def one_record_prefix(value_size: int) -> bytes:
    """The bytes of a v2 record (null key, no headers) up to its value."""
    inner = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(value_size)
    return zigzag(len(inner) + value_size + 1) + inner


def bomb_records(codec: int, value_size: int) -> bytes:
    """One record whose value is ``value_size`` zero bytes, compressed with ``codec``
    (1 gzip, 4 zstd) by streaming: neither side of this function holds the plain bytes."""
    chunk = bytes(1 << 20)
    full, rest = divmod(value_size, len(chunk))
    if codec == 1:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [z.compress(one_record_prefix(value_size))]
        parts += [z.compress(chunk) for _ in range(full)]
        parts += [z.compress(bytes(rest) + b"\x00"), z.flush()]
        return b"".join(parts)
    if codec == 4:
        c = cramjam.zstd.Compressor()
        c.compress(one_record_prefix(value_size))
        for _ in range(full):
            c.compress(chunk)
        c.compress(bytes(rest) + b"\x00")
        return bytes(c.finish())
    raise ValueError(f"no bomb for codec {codec}")


def vm_kb(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of process ``pid`` from /proc/<pid>/status, in kB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)
