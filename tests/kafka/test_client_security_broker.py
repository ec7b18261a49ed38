"""sparklog's client and CLI against a real secured broker (``tests.kafka.secured``): TLS,
SASL PLAIN and SCRAM, mutual TLS, ACL and SCRAM-user admin calls, the READ check, and
``--command-config``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.errors import AuthenticationError, KafkaConnectionError, TopicAuthorizationError
from sparklog.kafka import admin
from sparklog.kafka import security_admin as sa
from sparklog.kafka.client import ClientSettings, KafkaClient
from tests.kafka.secured import SecuredBroker, start_secured_broker


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    b = start_secured_broker(tmp_path_factory.mktemp("secured"))
    try:
        with KafkaClient(b.settings()) as c:
            admin.create_topic(c, "orders", 2, {})
        yield b
    finally:
        b.process.stop()
        b.process.kill()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_sasl_login(secured: SecuredBroker, protocol: str, mechanism: str) -> None:
    with KafkaClient(secured.settings("admin", mechanism, protocol)) as c:
        assert "orders" in admin.list_topics(c)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_is_an_authentication_error(secured: SecuredBroker, mechanism: str) -> None:
    s = secured.settings("alice", mechanism, "SASL_PLAINTEXT", sasl_password="nope")
    with pytest.raises(AuthenticationError, match=f"SASL {mechanism} as 'alice'"):
        KafkaClient(s)


def test_unknown_user_is_an_authentication_error(secured: SecuredBroker) -> None:
    s = secured.settings("mallory", "SCRAM-SHA-256", "SASL_PLAINTEXT", sasl_password="x")
    with pytest.raises(AuthenticationError):
        KafkaClient(s)


def test_an_untrusted_certificate_is_refused(secured: SecuredBroker) -> None:
    s = ClientSettings(secured.address("SSL"), 10, security_protocol="SSL")  # system CAs
    with pytest.raises(AuthenticationError, match="not trusted"):
        KafkaClient(s)


def test_plaintext_client_on_a_sasl_listener_gets_a_hint(secured: SecuredBroker) -> None:
    with pytest.raises(KafkaConnectionError, match="set security.protocol"):  # noqa: SIM117
        with KafkaClient(ClientSettings(secured.address("SASL_PLAINTEXT"), 10)) as c:
            admin.list_topics(c)


def test_mutual_tls_principal_and_read_check(secured: SecuredBroker) -> None:
    mtls = secured.settings(protocol="SSL", ssl_certfile=str(secured.dir / "carol.pem"),
                            ssl_keyfile=str(secured.dir / "carol.key"))  # fmt: skip
    with KafkaClient(mtls) as c, pytest.raises(TopicAuthorizationError, match="'orders'"):
        sa.check_read_access(c, ["orders"])
    acl = sa.Acl("TOPIC", "orders", "LITERAL", "User:carol", "*", "READ", "ALLOW")
    with KafkaClient(secured.settings()) as admin_c:
        sa.create_acls(admin_c, [acl])
    try:
        with KafkaClient(mtls) as c:
            sa.check_read_access(c, ["orders"])
    finally:
        with KafkaClient(secured.settings()) as admin_c:
            assert sa.delete_acls(admin_c, [acl]) == [acl]


def test_read_check_follows_acls(secured: SecuredBroker) -> None:
    bob = secured.settings("bob", "SCRAM-SHA-512")
    with pytest.raises(TopicAuthorizationError, match="User:bob may not READ topic 'orders'"):
        sa.require_read_access(bob, ["orders"])
    prefixed = sa.Acl("TOPIC", "ord", "PREFIXED", "User:bob", "*", "READ", "ALLOW")
    with KafkaClient(secured.settings()) as c:
        sa.create_acls(c, [prefixed])
        assert prefixed in sa.describe_acls(c)
        assert (
            sa.describe_acls(c, sa.Acl("ANY", None, "ANY", "User:nobody", None, "ANY", "ANY")) == []
        )
    try:
        sa.require_read_access(bob, ["orders"])
    finally:
        with KafkaClient(secured.settings()) as c:
            sa.delete_acls(c, [sa.Acl("ANY", None, "ANY", "User:bob", None, "ANY", "ANY")])
    with pytest.raises(TopicAuthorizationError):
        sa.require_read_access(bob, ["orders"])


def test_scram_users_online(secured: SecuredBroker) -> None:
    with KafkaClient(secured.settings()) as c:
        sa.upsert_user_scram_credential(c, "dave", "SCRAM-SHA-512", "dave-pw", 8192)
        assert sa.describe_user_scram_credentials(c, ["dave"]) == {"dave": {"SCRAM-SHA-512": 8192}}
    dave = secured.settings("dave", "SCRAM-SHA-512", sasl_password="dave-pw")
    with KafkaClient(dave) as c:
        admin.list_topics(c)
    with KafkaClient(secured.settings()) as c:
        sa.delete_user_scram_credential(c, "dave", "SCRAM-SHA-512")
    with pytest.raises(AuthenticationError):
        KafkaClient(dave)


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_cli_with_command_config(secured: SecuredBroker, tmp_path: Path) -> None:
    cfg = tmp_path / "admin.properties"
    cfg.write_text(
        "# as for kafka-acls.sh --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"ssl.truststore.location={secured.cafile}\n"
        "ssl.truststore.type=PEM\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="admin" password="admin-pw";\n'
    )
    broker = ["--bootstrap-server", secured.address("SASL_SSL"), "--command-config", str(cfg)]
    out = cli("topics", "list", *broker)
    assert out.returncode == 0 and "orders" in out.stdout.split(), out.stderr
    assert cli("groups", "list", *broker).returncode == 0
    add = cli("acls", "add", "--allow-principal", "User:erin", "--operation", "read",
              "--operation", "DESCRIBE", "--topic", "orders", "--group", "g1", *broker)  # fmt: skip
    assert add.returncode == 0 and "Added 4 ACL(s)" in add.stdout, add.stderr
    listed = cli("acls", "list", "--principal", "User:erin", *broker).stdout
    assert "TOPIC orders (LITERAL):" in listed and "ALLOW\tUser:erin\tREAD\thost=*" in listed
    removed = cli("acls", "remove", "--allow-principal", "User:erin", "--operation", "READ",
                  "--topic", "orders", "--group", "g1", *broker)  # fmt: skip
    assert "Removed 2 ACL(s)" in removed.stdout, removed.stderr
    rest = cli("acls", "remove", "--topic", "orders", "--group", "g1", *broker).stdout
    assert "Removed 2 ACL(s)" in rest  # the DESCRIBE ones: no principal removes them all
    assert cli("users", "add", "erin", "--mechanism", "SCRAM-SHA-256", *broker,
               stdin="erin-pw\n").returncode == 0  # fmt: skip
    assert "erin\tSCRAM-SHA-256 (iterations 4096)" in cli("users", "list", *broker).stdout
    with KafkaClient(secured.settings("erin", sasl_password="erin-pw")) as c:
        admin.list_topics(c)
    assert cli("users", "delete", "erin", "--mechanism", "SCRAM-SHA-256", *broker).returncode == 0
    refused = cli("topics", "list", "--bootstrap-server", secured.address("SASL_SSL"))
    assert refused.returncode == 1 and "security.protocol" in refused.stderr
