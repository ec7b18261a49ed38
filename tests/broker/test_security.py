"""Security on a real broker process: TLS and SASL listeners with confluent-kafka,
kafka-python and aiokafka, failed authentication, ACLs enforced on each API, users and
ACLs surviving a restart, and Kafka's security bugs as regressions."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from sparklog.errors import AuthenticationError, UnsupportedSaslMechanismError
from sparklog.kafka.wire import ApiKey
from tests.broker.rawclient import RawClient, record_batch
from tests.broker.secure import MECHANISMS, SecureBroker, consume, produce, start_secure_broker


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureBroker]:
    s = start_secure_broker(tmp_path)
    try:
        yield s
    finally:
        s.broker.stop()
        s.broker.kill()


METADATA = {"topics": [], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}  # fmt: skip


def admin(s: SecureBroker, user: str = "admin") -> AdminClient:
    return AdminClient(s.confluent("SASL_PLAINTEXT", user))


def add_acl(s: SecureBroker, *bindings: AclBinding) -> None:
    a = admin(s)  # held until the results are in: a client destroyed fails its futures
    for f in a.create_acls(list(bindings)).values():
        f.result(10)


def create_topics(s: SecureBroker, *names: str) -> None:
    """As the super user: a principal without CREATE cannot auto-create them."""
    a = admin(s)
    for f in a.create_topics([NewTopic(n, 1) for n in names]).values():
        f.result(10)


def allow(principal: str, rtype: ResourceType, name: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


# ---------------------------------------------------------------- authentication


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_over_each_sasl_protocol_produces_and_consumes(
    secure: SecureBroker, protocol: str, mechanism: str
) -> None:
    conf = secure.confluent(protocol, "admin", mechanism)
    topic = f"t-{protocol}-{mechanism}".lower()
    assert produce(conf, topic) == [None] * 5
    assert consume(conf, topic, "g", 5) == [b"v%d" % i for i in range(5)]


@pytest.mark.parametrize("protocol", ["SSL", "PLAINTEXT"])
def test_tls_and_plaintext_listeners_serve_anonymous_clients_when_acls_allow_them(
    secure: SecureBroker, protocol: str
) -> None:
    add_acl(secure, allow("User:ANONYMOUS", ResourceType.TOPIC, "open", AclOperation.ALL),
            allow("User:ANONYMOUS", ResourceType.GROUP, "g", AclOperation.READ))  # fmt: skip
    conf = secure.confluent(protocol, None)
    assert produce(conf, "open") == [None] * 5
    assert consume(conf, "open", "g", 5) == [b"v%d" % i for i in range(5)]


def test_a_client_certificate_authenticates_as_its_common_name(secure: SecureBroker) -> None:
    create_topics(secure, "certs")
    add_acl(secure, allow("User:carol", ResourceType.TOPIC, "certs", AclOperation.WRITE))
    anonymous = secure.confluent("SSL", None)
    assert produce(anonymous, "certs", 1, timeout=6)[0].code() == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    mtls = {**anonymous, "ssl.certificate.location": secure.client_cert,
            "ssl.key.location": secure.client_cert}  # fmt: skip
    assert produce(mtls, "certs") == [None] * 5


def test_kafka_python_authenticates_with_scram_over_tls(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    common = dict(bootstrap_servers=secure.broker.address("SASL_SSL"),
                  security_protocol="SASL_SSL", ssl_cafile=secure.ca_file,
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="admin",
                  sasl_plain_password="admin-secret")  # fmt: skip
    p = KafkaProducer(**common)
    for i in range(3):
        p.send("kp", b"k%d" % i).get(timeout=20)
    p.close()
    c = KafkaConsumer("kp", auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    assert [m.value for m in c][:3] == [b"k0", b"k1", b"k2"]
    c.close()


def test_aiokafka_authenticates_with_plain_and_scram(secure: SecureBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run(mechanism: str) -> list[bytes]:
        common = dict(bootstrap_servers=secure.broker.address("SASL_SSL"),
                      security_protocol="SASL_SSL",
                      ssl_context=create_ssl_context(cafile=secure.ca_file),
                      sasl_mechanism=mechanism, sasl_plain_username="admin",
                      sasl_plain_password="admin-secret")  # fmt: skip
        topic = "aio-" + mechanism.lower()
        p = AIOKafkaProducer(**common)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait(topic, b"a%d" % i)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await c.start()
        try:
            out = []
            async for m in c:
                out.append(m.value)
                if len(out) == 3:
                    return out
        finally:
            await c.stop()
        return out

    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        assert asyncio.run(asyncio.wait_for(run(mechanism), 60)) == [b"a0", b"a1", b"a2"]


@pytest.mark.parametrize(
    ("user", "password", "mechanism"),
    [("admin", "wrong", "SCRAM-SHA-256"), ("admin", "wrong", "PLAIN"),
     ("nobody", "x", "SCRAM-SHA-512"), ("nobody", "x", "PLAIN")],
)  # fmt: skip
def test_wrong_password_or_unknown_user_fails_authentication_and_others_are_served(
    secure: SecureBroker, user: str, password: str, mechanism: str
) -> None:
    conf = {**secure.confluent("SASL_SSL", user, mechanism), "sasl.password": password}
    settings = dataclasses.replace(secure.settings("SASL_SSL", user, mechanism),
                                   sasl_password=password)  # fmt: skip
    with pytest.raises(AuthenticationError, match="Authentication failed"):
        RawClient(settings)
    assert produce(conf, "t", 1, timeout=6)[0] is not None
    assert produce(secure.confluent("SASL_SSL"), "t", 1) == [None]


def test_a_mechanism_the_broker_does_not_enable_is_refused(tmp_path: Path) -> None:
    s = start_secure_broker(tmp_path, extra_security='sasl_mechanisms = ["SCRAM-SHA-512"]\n')
    try:
        with pytest.raises(UnsupportedSaslMechanismError, match="does not enable SCRAM-SHA-256"):
            RawClient(s.settings("SASL_PLAINTEXT", "admin", "SCRAM-SHA-256"))
        with RawClient(s.settings("SASL_PLAINTEXT", "admin", "SCRAM-SHA-512")) as c:
            assert c.request(ApiKey.METADATA, 9, METADATA).brokers
    finally:
        s.broker.stop()


def test_a_plaintext_client_on_the_tls_port_is_refused_and_the_broker_keeps_serving(
    secure: SecureBroker,
) -> None:
    port = secure.broker.endpoints["SASL_SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 20) + b"\x00\x12\x00\x00" + b"\x00" * 16)
        sock.settimeout(15)
        data = b""
        try:
            while chunk := sock.recv(100):
                data += chunk
        except ConnectionError:
            pass
        assert data == b"" or data[0] == 0x15  # nothing, or a TLS alert record; then closed
    assert produce(secure.confluent("SASL_SSL"), "t", 1) == [None]


def _sasl_socket(secure: SecureBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", secure.broker.endpoints["SASL_PLAINTEXT"]),
                                    timeout=10)  # fmt: skip


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(4) == b""
    except ConnectionError:
        return True


def test_garbage_during_the_handshake_closes_only_that_connection(secure: SecureBroker) -> None:
    from tests.broker import raw_frames

    with _sasl_socket(secure) as sock:
        sock.sendall(raw_frames.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}))
        (size,) = struct.unpack(">i", sock.recv(4))
        sock.recv(size)
        sock.sendall(
            raw_frames.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\xff\x00junk"})
        )
        (size,) = struct.unpack(">i", sock.recv(4))
        _, resp = raw_frames.parse_response(ApiKey.SASL_AUTHENTICATE, 2, sock.recv(size))
        assert resp.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert _closed(sock)
    with _sasl_socket(secure) as sock:
        sock.sendall(b"\x00\x00\x00\x10" + b"\xde\xad\xbe\xef" * 4)
        assert _closed(sock)
    assert produce(secure.confluent("SASL_PLAINTEXT"), "t", 1) == [None]


def test_requests_before_authentication_are_refused_and_close_the_connection(
    secure: SecureBroker,
) -> None:
    from tests.broker import raw_frames

    with _sasl_socket(secure) as sock:  # ApiVersions is allowed
        sock.sendall(raw_frames.request(ApiKey.API_VERSIONS, 3, raw_frames.api_versions_body(3)))
        (size,) = struct.unpack(">i", sock.recv(4))
        assert size > 0
        sock.recv(size)
        sock.sendall(raw_frames.request(ApiKey.METADATA, 9, METADATA))
        assert _closed(sock)


def test_large_unauthenticated_frames_are_refused_before_allocation(
    secure: SecureBroker,
) -> None:
    """CVE-2022-34917: the declared size alone closes the connection; the broker reads
    nothing more and allocates nothing."""
    with _sasl_socket(secure) as sock:
        sock.sendall(struct.pack(">i", 512 * 1024 + 1))
        assert _closed(sock)
    assert any("before authentication" in line for line in secure.broker.lines)
    assert produce(secure.confluent("SASL_PLAINTEXT"), "t", 1) == [None]


# ---------------------------------------------------------------- ACLs


def test_literal_and_prefixed_acls_allow_produce_consume_and_nothing_else(
    secure: SecureBroker,
) -> None:
    add_acl(
        secure,
        allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.WRITE),
        allow("User:alice", ResourceType.TOPIC, "pub-", AclOperation.READ,
              ResourcePatternType.PREFIXED),
        allow("User:alice", ResourceType.GROUP, "alice-", AclOperation.READ,
              ResourcePatternType.PREFIXED),
    )  # fmt: skip
    admin_conf = secure.confluent("SASL_SSL")
    create_topics(secure, "orders")
    assert produce(admin_conf, "pub-news") == [None] * 5
    assert produce(admin_conf, "secret") == [None] * 5
    alice = secure.confluent("SASL_SSL", "alice")
    assert produce(alice, "orders") == [None] * 5
    denied = produce(alice, "secret", 1, timeout=6)[0]
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume(alice, "pub-news", "alice-1", 5) == [b"v%d" % i for i in range(5)]
    (err,) = consume(alice, "pub-news", "other-group", 1, timeout=10)
    assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    (err,) = consume(alice, "secret", "alice-2", 1, timeout=10)
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_overrides_allow_and_super_users_are_exempt(secure: SecureBroker) -> None:
    add_acl(
        secure,
        allow("User:*", ResourceType.TOPIC, "*", AclOperation.ALL),
        allow("User:bob", ResourceType.TOPIC, "payroll", AclOperation.WRITE,
              permission=AclPermissionType.DENY),
        allow("User:admin", ResourceType.TOPIC, "payroll", AclOperation.ALL,
              permission=AclPermissionType.DENY),
    )  # fmt: skip
    assert produce(secure.confluent("SASL_SSL", "bob"), "other") == [None] * 5
    err = produce(secure.confluent("SASL_SSL", "bob"), "payroll", 1, timeout=6)[0]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(secure.confluent("SASL_SSL", "admin"), "payroll") == [None] * 5


def test_metadata_lists_only_the_topics_the_principal_may_describe(secure: SecureBroker) -> None:
    a = admin(secure)
    for f in a.create_topics([NewTopic(t, 1) for t in ("m-open", "m-hidden")]).values():
        f.result(10)
    add_acl(secure, allow("User:alice", ResourceType.TOPIC, "m-open", AclOperation.READ))
    listed = AdminClient(secure.confluent("SASL_SSL", "alice")).list_topics(timeout=10).topics
    assert "m-open" in listed and "m-hidden" not in listed
    assert set(a.list_topics(timeout=10).topics) >= {"m-open", "m-hidden"}


def test_admin_operations_need_their_acls(secure: SecureBroker) -> None:
    alice = AdminClient(secure.confluent("SASL_SSL", "alice"))
    (f,) = alice.create_topics([NewTopic("new-one", 1)]).values()
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        f.result(10)
    add_acl(secure, allow("User:alice", ResourceType.TOPIC, "new-", AclOperation.CREATE,
                          ResourcePatternType.PREFIXED))  # fmt: skip
    (f,) = alice.create_topics([NewTopic("new-one", 1)]).values()
    f.result(10)
    (f,) = alice.delete_topics(["new-one"]).values()
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        f.result(10)
    with RawClient(secure.settings("SASL_PLAINTEXT", "alice")) as c:
        described = c.request(ApiKey.DESCRIBE_ACLS, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})  # fmt: skip
        assert described.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED


def test_acls_are_described_and_deleted_by_filter(secure: SecureBroker) -> None:
    add_acl(secure,
            allow("User:alice", ResourceType.TOPIC, "x", AclOperation.READ),
            allow("User:bob", ResourceType.TOPIC, "x", AclOperation.READ),
            allow("User:bob", ResourceType.GROUP, "gx", AclOperation.READ))  # fmt: skip
    a = admin(secure)
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert len(a.describe_acls(any_filter).result(10)) == 3
    bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                           AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    (f,) = a.delete_acls([bob]).values()
    assert len(f.result(10)) == 2
    (left,) = a.describe_acls(any_filter).result(10)
    assert left.principal == "User:alice"


def test_users_and_acls_survive_a_restart(secure: SecureBroker) -> None:
    a = admin(secure)
    up = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-secret"
    )
    for f in a.alter_user_scram_credentials([up]).values():
        f.result(10)
    create_topics(secure, "d")
    add_acl(secure, allow("User:dave", ResourceType.TOPIC, "d", AclOperation.WRITE))
    secure.users["dave"] = "dave-secret"
    secure.broker.stop()
    secure.broker.start()
    assert produce(secure.confluent("SASL_SSL", "dave"), "d") == [None] * 5
    a = admin(secure)
    described = a.describe_user_scram_credentials(["dave"])["dave"].result(10)
    assert described.scram_credential_infos[0].iterations == 4096


def test_scram_users_are_managed_online_and_deleted_users_cannot_log_in(
    secure: SecureBroker,
) -> None:
    a = admin(secure)
    up = UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"erin-pw"
    )
    for f in a.alter_user_scram_credentials([up]).values():
        f.result(10)
    secure.users["erin"] = "erin-pw"
    create_topics(secure, "e")
    add_acl(secure, allow("User:erin", ResourceType.TOPIC, "e", AclOperation.WRITE))
    assert produce(secure.confluent("SASL_SSL", "erin", "SCRAM-SHA-512"), "e") == [None] * 5
    gone = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)
    for f in a.alter_user_scram_credentials([gone]).values():
        f.result(10)
    with pytest.raises(Exception, match="Authentication failed|SASL_AUTHENTICATION_FAILED"):
        RawClient(secure.settings("SASL_SSL", "erin", "SCRAM-SHA-512"))


# ---------------------------------------------------------------- Kafka's security bugs


def test_a_client_cannot_send_replica_only_requests(secure: SecureBroker) -> None:
    """CVE-2018-1288: WriteTxnMarkers and a follower's Fetch are for brokers only."""
    add_acl(secure, allow("User:alice", ResourceType.TOPIC, "*", AclOperation.ALL))
    assert produce(secure.confluent("SASL_PLAINTEXT"), "r", 1) == [None]
    with RawClient(secure.settings("SASL_PLAINTEXT", "alice")) as c:
        marker = {"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                  "topics": [{"name": "r", "partition_indexes": [0]}],
                  "coordinator_epoch": 0}  # fmt: skip
        resp = c.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [marker]})
        assert resp.markers[0].topics[0].partitions[0].error_code == 31  # CLUSTER_AUTH...
        fetch = c.request(ApiKey.FETCH, 12, {
            "replica_id": 1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "r", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})  # fmt: skip
        assert fetch.responses[0].partitions[0].error_code == 29  # TOPIC_AUTHORIZATION...


def test_idempotent_and_transactional_produce_need_their_acls(secure: SecureBroker) -> None:
    """CVE-2018-17196: no producer id for a principal that may write nowhere, no
    idempotent write to a topic it may not write, no transactional write without WRITE on
    the transactional id."""
    with RawClient(secure.settings("SASL_PLAINTEXT", "bob")) as c:
        resp = c.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout": 60000,
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        assert resp.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
        batch = record_batch([b"x"], producer_id=1000, producer_epoch=0, base_sequence=0)
        assert c.produce("idem", 0, batch).error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    create_topics(secure, "idem")
    add_acl(secure, allow("User:bob", ResourceType.TOPIC, "idem", AclOperation.WRITE))
    with RawClient(secure.settings("SASL_PLAINTEXT", "bob")) as c:
        resp = c.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "tx", "transaction_timeout": 60000,
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        assert resp.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    conf = secure.confluent("SASL_PLAINTEXT", "bob", **{"enable.idempotence": True})
    assert produce(conf, "idem") == [None] * 5
    p = Producer({**secure.confluent("SASL_PLAINTEXT", "bob"), "transactional.id": "tx"})
    with pytest.raises(KafkaException, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        p.init_transactions(10)


def test_sasl_sessions_expire_and_re_authentication_keeps_the_connection(tmp_path: Path) -> None:
    """KIP-368: with connections_max_reauth_ms the client is told its session lifetime and
    re-authenticates on the same connection; librdkafka does it by itself."""
    s = start_secure_broker(tmp_path, extra_security="connections_max_reauth_ms = 1500\n")
    try:
        conf = s.confluent("SASL_PLAINTEXT")
        p = Producer({**conf, "message.timeout.ms": 10_000})
        errors: list[Any] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            p.produce("reauth", b"x", on_delivery=lambda e, _m: errors.append(e))
            p.flush(10)
            time.sleep(0.2)
        assert errors and all(e is None for e in errors)
        with RawClient(s.settings("SASL_PLAINTEXT")) as c:
            time.sleep(2)
            with pytest.raises(Exception):  # noqa: B017 - expired: the broker closes it
                c.request(ApiKey.METADATA, 9, METADATA)
    finally:
        s.broker.stop()
