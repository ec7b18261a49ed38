"""sparklog's own Kafka client: one blocking connection, one request at a time.

Used where sparklog talks to a broker itself: the CLI's admin calls (``sparklog.kafka.admin``),
the Spark source's group commits, the Spark sink's producer, and the protocol tests.
Applications use real Kafka clients instead.

``ClientSettings`` is the one place for how to connect: the bootstrap servers (tried in
order until one answers), the timeout, the client id. Connection security (TLS, SASL)
belongs there too, so every caller gets it at once. ``from_options`` reads Kafka's
``kafka.*`` option names as Spark's Kafka source passes them.

``request`` sends a request built from plain data (``wire.build`` fits it to the version)
and returns the parsed kio response; ``send`` and ``receive`` are its two halves, for
callers that pipeline.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import KafkaConnectionError
from sparklog.kafka import wire
from sparklog.kafka.address import parse_bootstrap

_SIZE = struct.Struct(">i")
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ClientSettings:
    """How sparklog's client connects (see the module docstring)."""

    bootstrap: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    client_id: str = "sparklog"

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap)  # a bad address fails here, where it was given
        if self.timeout_s <= 0:
            raise ValueError(f"client timeout must be positive, got {self.timeout_s}")

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], *, client_id: str = "sparklog"
    ) -> ClientSettings:
        """Settings from Kafka client options (``kafka.`` prefix optional, names
        case-insensitive): ``bootstrap.servers`` (required), ``client.id``."""
        opts = {k.lower().removeprefix("kafka."): str(v) for k, v in options.items()}
        bootstrap = opts.get("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ValueError("kafka.bootstrap.servers is required")
        return cls(bootstrap, client_id=opts.get("client.id", client_id))

    def with_timeout(self, timeout_s: float) -> ClientSettings:
        return ClientSettings(self.bootstrap, timeout_s, self.client_id)


class KafkaClient:
    """See the module docstring. Use as a context manager."""

    def __init__(self, settings: ClientSettings | str, *, timeout_s: float | None = None) -> None:
        if isinstance(settings, str):
            settings = ClientSettings(settings)
        if timeout_s is not None:
            settings = settings.with_timeout(timeout_s)
        self.settings = settings
        self.client_id = settings.client_id
        self._correlation = 0
        self.sock = self._connect()

    def _connect(self) -> socket.socket:
        failures = []
        for host, port in parse_bootstrap(self.settings.bootstrap):
            try:
                sock = socket.create_connection((host, port), timeout=self.settings.timeout_s)
            except OSError as e:
                failures.append(f"{host}:{port}: {e}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        raise KafkaConnectionError("cannot connect to a broker at " + "; ".join(failures))

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise KafkaConnectionError("the broker closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Write one request (a kio entity or plain data); returns its correlation id."""
        self._correlation += 1
        frame = wire.encode_request(
            api_key, version, self._correlation, body, client_id=self.client_id
        )
        self.sock.sendall(frame)
        return self._correlation

    def receive(self, api_key: int, version: int, correlation_id: int | None = None) -> Any:
        """Read one response frame and parse it as the response of ``api_key``/``version``."""
        (size,) = _SIZE.unpack(self._recv_exact(4))
        correlation, body = wire.decode_response(api_key, version, self._recv_exact(size))
        if correlation_id is not None and correlation != correlation_id:
            raise KafkaConnectionError(
                f"response correlation id {correlation}, expected {correlation_id}"
            )
        return body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return its parsed response."""
        return self.receive(api_key, version, self.send(api_key, version, body))
