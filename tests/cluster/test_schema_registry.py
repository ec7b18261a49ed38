"""The Schema Registry in cluster mode: three brokers, a real etcd, one ``_schemas`` topic.

Only the broker leading ``_schemas``-0 assigns ids and versions; the others forward
changes to it and answer reads from the shared log (docs/schemas.md). These tests check
what a client sees of that: every broker serves every schema under the same id, ids stay
unique when changes arrive through every broker at once, and a SIGKILL of the leader
loses no schema and reuses no id.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sparklog_testkit.processes import BrokerCluster, EtcdCluster
from tests.broker.registry_helpers import http
from tests.cluster.helpers import leaders


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 3, lease_ttl_ms=2000,
                       schema_registry=True) as c:  # fmt: skip
        yield c


def record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": f, "type": "string"} for f in fields]})  # fmt: skip


def register(url: str, subject: str, schema: str, timeout: float = 60) -> int:
    """Register through the broker at ``url``, retrying while no broker may write (500,
    50003: ``_schemas`` has no leader yet, or its leader just died)."""
    deadline = time.monotonic() + timeout
    while True:
        a = http(url, "POST", f"/subjects/{subject}/versions", {"schema": schema})
        if a.status == 200:
            return int(a.body["id"])
        assert a.status >= 500 and time.monotonic() < deadline, (a.status, a.raw)
        time.sleep(0.2)


def test_a_schema_registered_through_one_broker_is_served_by_every_broker(
    cluster: BrokerCluster,
) -> None:
    b1, b2, b3 = (cluster.brokers[i] for i in (1, 2, 3))
    v1 = register(b1.registry_url, "orders-value", record("Order", "id"))
    v2 = register(b2.registry_url, "orders-value",
                  json.dumps({"type": "record", "name": "Order", "fields": [
                      {"name": "id", "type": "string"},
                      {"name": "note", "type": "string", "default": ""}]}))  # fmt: skip
    assert v2 == v1 + 1
    for b in (b1, b2, b3):
        assert http(b.registry_url, "GET", "/subjects/orders-value/versions").body == [1, 2]
        served = http(b.registry_url, "GET", f"/schemas/ids/{v1}").body["schema"]
        assert json.loads(served) == json.loads(record("Order", "id"))
    # confluent-kafka's serializer against broker 2, its deserializer against broker 3
    ctx = SerializationContext("orders", MessageField.VALUE)
    ser = AvroSerializer(SchemaRegistryClient({"url": b2.registry_url}), record("Order", "id"),
                         conf={"auto.register.schemas": False})  # fmt: skip
    value = ser({"id": "o-1"}, ctx)
    assert value[1:5] == v1.to_bytes(4, "big")
    got = AvroDeserializer(SchemaRegistryClient({"url": b3.registry_url}))(value, ctx)
    assert got == {"id": "o-1"}


def test_changes_through_every_broker_at_once_get_unique_ids(cluster: BrokerCluster) -> None:
    ids: dict[tuple[int, int], int] = {}
    errors: list[BaseException] = []

    def work(node: int) -> None:
        url = cluster.brokers[node].registry_url
        try:
            for k in range(8):
                ids[(node, k)] = register(url, f"s{node}-{k}-value", record(f"R{node}x{k}", "a"))
        except BaseException as e:  # reported below, with the others
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(set(ids.values())) == 24  # one id per schema, none given twice
    assert sorted(ids.values()) == list(range(min(ids.values()), min(ids.values()) + 24))
    for b in cluster.brokers.values():
        for (node, k), sid in ids.items():
            a = http(b.registry_url, "GET", f"/schemas/ids/{sid}").body
            assert json.loads(a["schema"])["name"] == f"R{node}x{k}"


def test_a_killed_registry_leader_loses_no_schema_and_reuses_no_id(
    cluster: BrokerCluster,
) -> None:
    first = {n: register(cluster.brokers[n].registry_url, f"k{n}-value", record(f"K{n}", "a"))
             for n in (1, 2, 3)}  # fmt: skip
    leader = leaders(cluster.bootstrap, "_schemas", 1)[0]
    cluster.brokers[leader].proc.kill()  # type: ignore[union-attr]  # SIGKILL
    cluster.brokers[leader].proc.wait()  # type: ignore[union-attr]
    others = [b for n, b in cluster.brokers.items() if n != leader]
    leaders(others[0].bootstrap, "_schemas", 1, avoid=leader)
    after = register(others[0].registry_url, "after-value", record("After", "a"))
    assert after == max(first.values()) + 1  # the successor read its predecessor's records
    # registering a known schema again, through the other survivor, is its old id
    assert register(others[1].registry_url, "again-value", record("K1", "a")) == first[1]
    cluster.brokers[leader].start()  # back, it serves what was registered while it was down
    url = cluster.brokers[leader].registry_url
    for n, sid in [*first.items(), (0, after)]:
        body: Any = None
        deadline = time.monotonic() + 30
        while body is None or "schema" not in body:
            assert time.monotonic() < deadline, body
            body = http(url, "GET", f"/schemas/ids/{sid}").body
        assert json.loads(body["schema"])["name"] == (f"K{n}" if n else "After")
    assert http(url, "GET", "/subjects/again-value/versions").body == [1]
    assert register(url, "k1-value", record("K1", "a")) == first[1]
    refused = http(url, "POST", "/subjects/k1-value/versions", {"schema": record("K1", "b")})
    assert refused.status == 409  # BACKWARD, as before
    assert http(url, "GET", "/subjects/k1-value/versions").body == [1]
