"""Apache Kafka's own Java tools and clients (4.3.1, from the Maven jars) against a secured
sparklog broker: ``kafka-acls`` adds, lists and removes literal and prefixed ACLs as the
super user and is refused to anyone else; ``kafka-configs`` creates and deletes a SCRAM
user online; the console producer and consumer over SASL_SSL (SCRAM-SHA-512, PEM trust
store) and SASL_PLAINTEXT (PLAIN); a Java client with a wrong password fails to
authenticate while the broker keeps serving. The effects are checked with confluent-kafka."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramMechanism,
)

from tests.broker.secure import SecureBroker, consume, produce, start_secure_broker

from .tools import (
    CONFIG_COMMAND,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    TOOLS,
    TOPIC_COMMAND,
    kafka_tool,
)

pytestmark = pytest.mark.jvm

ACL_COMMAND = TOOLS + "AclCommand"
LOG = logging.getLogger("rdkafka")  # its retry noise goes to pytest's captured log
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """One broker for the module: each test uses its own topics, groups and users."""
    s = start_secure_broker(tmp_path_factory.mktemp("java-security"))
    try:
        yield s
    finally:
        s.broker.stop()
        s.broker.kill()


def java_config(secure: SecureBroker, path: Path, protocol: str = "SASL_SSL",
                user: str = "admin", mechanism: str = "SCRAM-SHA-512",
                password: str | None = None) -> str:  # fmt: skip
    """A Java client properties file for ``protocol`` as ``user``; its path."""
    lines = [f"security.protocol={protocol}"]
    if protocol.endswith("SSL"):
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={secure.ca_file}"]
    if protocol.startswith("SASL"):
        secret = secure.users[user] if password is None else password
        lines += [
            f"sasl.mechanism={mechanism}",
            f'sasl.jaas.config={LOGIN_MODULES[mechanism]} required username="{user}" '
            f'password="{secret}";',
        ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def as_admin(secure: SecureBroker, tmp_path: Path) -> tuple[str, ...]:
    """``--bootstrap-server`` and ``--command-config`` for admin over SASL_SSL."""
    return ("--bootstrap-server", secure.broker.address("SASL_SSL"),
            "--command-config", java_config(secure, tmp_path / "admin.properties"))  # fmt: skip


def create_topics(secure: SecureBroker, *names: str) -> None:
    a = AdminClient(secure.confluent("SASL_PLAINTEXT"))
    for f in a.create_topics([NewTopic(n, 1) for n in names]).values():
        f.result(10)


def login(conf: dict[str, Any], timeout: float = 20) -> KafkaError | None:
    """None once a confluent-kafka client with ``conf`` authenticates and reads metadata;
    the authentication error it reports if it cannot."""
    errors: list[KafkaError] = []
    a = AdminClient({**conf, "error_cb": errors.append, "logger": LOG})
    deadline = time.monotonic() + timeout
    while True:
        try:
            a.list_topics(timeout=1)
            return None
        except KafkaException as e:
            a.poll(0.2)  # serves error_cb
            failed = [err for err in errors if err.code() == KafkaError._AUTHENTICATION]
            if failed or time.monotonic() > deadline:
                return failed[0] if failed else e.args[0]


def output(proc: Any) -> str:
    return proc.stdout + proc.stderr


def test_acl_command_adds_lists_and_removes_literal_and_prefixed_acls(
    secure: SecureBroker, tmp_path: Path
) -> None:
    create_topics(secure, "orders")
    admin = as_admin(secure, tmp_path)
    alice = secure.confluent("SASL_SSL", "alice")
    denied = produce(alice, "orders", 1, timeout=6)[0]
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    kafka_tool(ACL_COMMAND, *admin, "--add", "--allow-principal", "User:alice",
               "--operation", "Write", "--topic", "orders")  # fmt: skip
    kafka_tool(ACL_COMMAND, *admin, "--add", "--allow-principal", "User:alice",
               "--operation", "Read", "--topic", "ord", "--group", "alice-",
               "--resource-pattern-type", "prefixed")  # fmt: skip
    out = kafka_tool(ACL_COMMAND, *admin, "--list").stdout
    assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in out
    assert "ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)" in out
    assert "ResourcePattern(resourceType=GROUP, name=alice-, patternType=PREFIXED)" in out
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out
    assert produce(alice, "orders") == [None] * 5
    assert consume(alice, "orders", "alice-1", 5) == [b"v%d" % i for i in range(5)]
    kafka_tool(ACL_COMMAND, *admin, "--remove", "--force", "--topic", "orders")
    out = kafka_tool(ACL_COMMAND, *admin, "--list").stdout
    assert "name=orders, patternType=LITERAL" not in out
    assert "name=ord, patternType=PREFIXED" in out
    denied = produce(alice, "orders", 1, timeout=6)[0]
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume(alice, "orders", "alice-2", 5) == [b"v%d" % i for i in range(5)]


def test_acl_command_is_refused_to_a_user_without_alter_on_the_cluster(
    secure: SecureBroker, tmp_path: Path
) -> None:
    config = java_config(secure, tmp_path / "alice.properties", user="alice")
    proc = kafka_tool(ACL_COMMAND, "--bootstrap-server", secure.broker.address("SASL_SSL"),
                      "--command-config", config, "--add", "--allow-principal", "User:alice",
                      "--operation", "All", "--topic", "*", check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "ClusterAuthorizationException" in output(proc), output(proc)
    admin = AdminClient(secure.confluent("SASL_PLAINTEXT"))
    alices = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                              None, AclOperation.ALL, AclPermissionType.ANY)  # fmt: skip
    assert admin.describe_acls(alices).result(10) == []


def test_config_command_creates_and_deletes_a_scram_user_online(
    secure: SecureBroker, tmp_path: Path
) -> None:
    admin = as_admin(secure, tmp_path)
    carol = ("--entity-type", "users", "--entity-name", "carol")
    secure.users["carol"] = "carol-pw"
    conf = secure.confluent("SASL_SSL", "carol", "SCRAM-SHA-256")
    err = login(conf)
    assert err is not None and err.code() == KafkaError._AUTHENTICATION, err
    kafka_tool(CONFIG_COMMAND, *admin, *carol, "--alter", "--add-config",
               "SCRAM-SHA-256=[iterations=8192,password=carol-pw]")  # fmt: skip
    check = AdminClient(secure.confluent("SASL_PLAINTEXT"))  # held until the result is in
    described = check.describe_user_scram_credentials(["carol"])["carol"].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    assert login(conf) is None
    kafka_tool(CONFIG_COMMAND, *admin, *carol, "--alter", "--delete-config", "SCRAM-SHA-256")
    err = login(conf)
    assert err is not None and err.code() == KafkaError._AUTHENTICATION, err


def test_config_command_describes_a_scram_user(secure: SecureBroker, tmp_path: Path) -> None:
    admin = as_admin(secure, tmp_path)
    dave = ("--entity-type", "users", "--entity-name", "dave")
    kafka_tool(CONFIG_COMMAND, *admin, *dave, "--alter", "--add-config",
               "SCRAM-SHA-512=[iterations=4096,password=dave-pw]")  # fmt: skip
    out = kafka_tool(CONFIG_COMMAND, *admin, *dave, "--describe").stdout
    assert (
        "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-512=iterations=4096"
        in out
    ), out


@pytest.mark.parametrize(
    ("protocol", "mechanism"), [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")]
)
def test_console_producer_and_consumer_round_trip_over_sasl(
    secure: SecureBroker, tmp_path: Path, protocol: str, mechanism: str
) -> None:
    topic = f"console-{protocol}-{mechanism}".lower()
    config = java_config(secure, tmp_path / "client.properties", protocol, "admin", mechanism)
    bootstrap = ("--bootstrap-server", secure.broker.address(protocol))
    lines = [f"k{i}:value {i} via {protocol}" for i in range(30)]
    kafka_tool(
        CONSOLE_PRODUCER, *bootstrap, "--topic", topic, "--command-config", config,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    out = kafka_tool(
        CONSOLE_CONSUMER, *bootstrap, "--topic", topic, "--command-config", config,
        "--from-beginning", "--max-messages", "30", "--timeout-ms", "30000",
        "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:",
    ).stdout  # fmt: skip
    assert out.split("\n")[:30] == lines
    got = consume(secure.confluent(protocol, "admin", mechanism), topic, "check", 30)
    assert got == [line.split(":", 1)[1].encode() for line in lines]


def test_a_java_client_with_a_wrong_password_fails_and_the_broker_keeps_serving(
    secure: SecureBroker, tmp_path: Path
) -> None:
    config = java_config(secure, tmp_path / "wrong.properties", password="not-the-password")
    proc = kafka_tool(TOPIC_COMMAND, "--bootstrap-server", secure.broker.address("SASL_SSL"),
                      "--command-config", config, "--list", timeout=90,
                      check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "SaslAuthenticationException" in output(proc), output(proc)
    assert produce(secure.confluent("SASL_SSL"), "after-bad-login", 1) == [None]
