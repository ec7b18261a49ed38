"""Helpers of the Schema Registry tests: raw HTTP calls (stdlib only), and producing and
consuming with confluent-kafka."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw)

    @property
    def code(self) -> int:
        """The registry's ``error_code``."""
        return int(self.body["error_code"])


def http(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    auth: str | None = None,
    content_type: str = CONTENT_TYPE,
    timeout: float = 30,
) -> Answer:
    """One request to the registry at ``base``; any status is an ``Answer``."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Accept", CONTENT_TYPE)
    if data is not None:
        req.add_header("Content-Type", content_type)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Answer(resp.status, dict(resp.headers), resp.read())
    except urllib.error.HTTPError as e:
        return Answer(e.code, dict(e.headers), e.read())


def register(
    base: str, subject: str, schema: str, *, auth: str | None = None, **extra: Any
) -> Answer:
    """Register ``schema`` under ``subject``; ``extra`` are more fields of the body."""
    body = {"schema": schema, **extra}
    return http(base, "POST", f"/subjects/{subject}/versions", body, auth=auth)


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes | None],
    *,
    key: bytes | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    keys: list[bytes | None] | None = None,
) -> list[KafkaError | None]:
    """Produce ``values`` one request each (idempotence off, no retries, so that a refused
    record is not retried); the delivery error of each (None: written)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False,
                  "linger.ms": 0, "retries": 0, "message.timeout.ms": 20000})  # fmt: skip
    out: list[KafkaError | None] = [None] * len(values)
    done = [False] * len(values)

    def report(i: int) -> Any:
        def cb(err: KafkaError | None, _msg: Any) -> None:
            out[i], done[i] = err, True

        return cb

    for i, value in enumerate(values):
        k = keys[i] if keys is not None else key
        p.produce(topic, value=value, key=k, headers=headers, on_delivery=report(i))
        p.flush(20)
    assert all(done), "a delivery report is missing"
    return out


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def consume(bootstrap: str, topic: str, count: int, timeout: float = 20) -> list[Any]:
    """``count`` messages of ``topic`` from its start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
    finally:
        c.close()
    assert len(out) == count, f"{len(out)} of {count} messages of {topic}"
    return out
