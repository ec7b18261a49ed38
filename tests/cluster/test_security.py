"""Security in cluster mode: each broker advertises, to a client, the address of the
listener the client came in on; users and ACLs are shared by every broker (one storage
root); transaction markers reach other leaders over the secured inter-broker listener."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from sparklog_testkit.processes import BrokerCluster, EtcdCluster
from tests.broker.secure import write_security

LISTEN = "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture
def secured(etcd: EtcdCluster, tmp_path: Path) -> Iterator[tuple[BrokerCluster, str]]:
    shared = str(tmp_path / "shared")
    config = write_security(tmp_path, shared, users=PASSWORDS, settings=(
        'sasl_mechanisms = ["SCRAM-SHA-512"]\n'
        "authorizer = true\n"
        'super_users = ["User:admin"]\n'
        'inter_broker_listener = "SASL_SSL"\n'
        'inter_broker_username = "admin"\n'
        'inter_broker_password = "admin-secret"\n'
    ))  # fmt: skip
    with BrokerCluster(shared, etcd.endpoints, 3, lease_ttl_ms=2000, listen=LISTEN,
                       extra=("--config", str(config))) as c:  # fmt: skip
        yield c, str(tmp_path / "ca.pem")


def conf(c: BrokerCluster, ca: str, protocol: str = "SASL_SSL", user: str = "admin") -> dict:
    b = c.brokers[1]
    out = {"bootstrap.servers": b.address(protocol), "security.protocol": protocol,
           "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
           "sasl.password": PASSWORDS[user]}  # fmt: skip
    if protocol == "SASL_SSL":
        out["ssl.ca.location"] = ca
    return out


def test_each_broker_is_advertised_at_the_listener_the_client_used(
    secured: tuple[BrokerCluster, str],
) -> None:
    c, ca = secured
    for protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        expected = {i: b.endpoints[protocol] for i, b in c.brokers.items()}
        deadline = time.monotonic() + 30
        while True:
            md = AdminClient(conf(c, ca, protocol)).list_topics(timeout=10)
            seen = {n: b.port for n, b in md.brokers.items()}
            if seen == expected or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert seen == expected


def test_acls_made_through_one_broker_hold_on_all_and_markers_cross_brokers(
    secured: tuple[BrokerCluster, str],
) -> None:
    c, ca = secured
    admin = AdminClient(conf(c, ca))
    for f in admin.create_topics([NewTopic("sec", 3, 1)]).values():
        f.result(30)
    bindings = [
        AclBinding(ResourceType.TOPIC, "sec", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.ALL, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "alice-", ResourcePatternType.PREFIXED,
                   "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED,
                   "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    ]  # fmt: skip
    for f in admin.create_acls(bindings).values():
        f.result(30)
    time.sleep(2.5)  # the other brokers pick ACLs up on their maintenance tick (1 s)
    p = Producer({**conf(c, ca, user="alice"), "transactional.id": "alice-tx",
                  "transaction.timeout.ms": 60_000})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):  # partitions led by several brokers: markers go over SASL_SSL
        p.produce("sec", value=b"c%d" % i, partition=i)
    p.commit_transaction(30)
    consumer = Consumer({**conf(c, ca, user="alice"), "group.id": "alice-g",
                         "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe(["sec"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert sorted(got) == [b"c0", b"c1", b"c2"]
    denied = Producer({**conf(c, ca, user="alice"), "message.timeout.ms": 5000})
    errors: list[KafkaError] = []
    denied.produce("other", b"x", on_delivery=lambda e, _m: errors.append(e))
    denied.flush(10)
    assert errors and errors[0] is not None
