"""``sparklog users`` offline (a storage root's credential store), and the argument checks
of ``users``, ``acls`` and ``--command-config`` that need no broker. (Against a secured
broker: tests/kafka/test_client_security_broker.py.)"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

from sparklog.cli import main
from sparklog.cli.arguments import client_settings
from sparklog.security.store import CredentialStore
from sparklog.storage import Storage


def run(capsys: pytest.CaptureFixture[str], *args: str, stdin: str = "") -> tuple[int, str, str]:
    import sys

    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(args))
    finally:
        sys.stdin = old
    out = capsys.readouterr()
    return code, out.out, out.err


def test_users_add_list_delete_offline(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    Storage(root).topics.create("t", 1)
    code, out, err = run(capsys, "users", "add", "alice", "--mechanism", "scram-sha-256",
                         "--data-dir", root, stdin="s3cret\nignored\n")  # fmt: skip
    assert code == 0, err
    assert "SCRAM-SHA-256" in out and "alice" in out
    code, _, err = run(capsys, "users", "add", "alice", "--mechanism", "SCRAM-SHA-512",
                       "--iterations", "8192", "--data-dir", root, stdin="other\n")  # fmt: skip
    assert code == 0, err
    cred = CredentialStore(Storage(root)).users()["alice"]["SCRAM-SHA-256"]
    assert cred.check_password("s3cret") and not cred.check_password("s3cret\n")
    code, out, _ = run(capsys, "users", "list", "--data-dir", root)
    assert out.strip() == (
        "alice\tSCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 8192)"
    )
    code, out, _ = run(capsys, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256",
                       "--data-dir", root)  # fmt: skip
    assert code == 0
    assert set(CredentialStore(Storage(root)).users()["alice"]) == {"SCRAM-SHA-512"}
    code, _, err = run(capsys, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256",
                       "--data-dir", root)  # fmt: skip
    assert code == 2 and "no SCRAM-SHA-256 credential" in err


def test_users_add_refuses_an_empty_password(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "users", "add", "bob", "--mechanism", "SCRAM-SHA-256",
                       "--data-dir", root, stdin="\n")  # fmt: skip
    assert code == 2 and "password" in err


def test_users_needs_exactly_one_target(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "users", "list")
    assert code == 2 and "exactly one of" in err
    code, _, err = run(capsys, "users", "list", "--data-dir", root, "--command-config", "x")
    assert code == 2 and "--command-config needs --bootstrap-server" in err


def test_topics_command_config_needs_a_broker(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "topics", "list", "--data-dir", root, "--command-config", "x")
    assert code == 2 and "--command-config needs --bootstrap-server" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "--allow-principal", "User:a", "--operation", "READ"], "needs a resource"),
        (["add", "--topic", "t"], "needs --allow-principal or --deny-principal"),
        (["remove", "--topic", "t", "--principal", "User:a"], "takes --allow-principal"),
        (["list", "--allow-principal", "User:a"], "filters with --principal"),
        (["add", "--topic", "t", "--allow-principal", "alice"], "TYPE:NAME"),
        (["add", "--topic", "t", "--allow-principal", "User:a", "--operation", "EAT"],
         "unknown operation"),
    ],
)  # fmt: skip
def test_acls_argument_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 127.0.0.1:9 (discard) is never contacted: the arguments are refused first
    code, _, err = run(capsys, "acls", *args, "--bootstrap-server", "127.0.0.1:9")
    assert code == 2 and message in err, err


def test_command_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "client.properties"
    cfg.write_text(
        "bootstrap.servers=ignored:1\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '  username="admin" password="pw";\n'
    )
    s = client_settings("127.0.0.1:9092", str(cfg))
    assert s.bootstrap == "127.0.0.1:9092"  # --bootstrap-server wins
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_username) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin"
    )  # fmt: skip
    with pytest.raises(ValueError, match="--command-config: cannot read"):
        client_settings("127.0.0.1:9092", str(tmp_path / "missing"))
    cfg.write_text("security.protocol=SASL_SSL\n")
    with pytest.raises(ValueError, match="--command-config: .*user name and password"):
        client_settings("127.0.0.1:9092", str(cfg))


def _ssl_config(tmp_path: Path, store: Path, kind: str | None = None) -> str:
    cfg = tmp_path / "ssl.properties"
    cfg.write_text(f"security.protocol=SSL\nssl.truststore.location={store}\n"
                   + (f"ssl.truststore.type={kind}\n" if kind else ""))  # fmt: skip
    return str(cfg)


@pytest.mark.parametrize("kind", [None, "JKS"])
def test_a_pem_truststore_of_type_jks_is_told_to_say_pem_not_to_convert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str | None
) -> None:
    """Kafka 4.3.1's tools refuse a PEM file under the default type JKS too ("Failed to
    load SSL keystore ... of type JKS: Invalid keystore format", checked with
    TopicCommand --command-config); the error says what to change in the file."""
    import trustme

    pem = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(pem))
    code, _, err = run(capsys, "topics", "list", "--bootstrap-server", "127.0.0.1:9",
                       "--command-config", _ssl_config(tmp_path, pem, kind))  # fmt: skip
    assert code == 2, err
    assert f"{pem}, which is already a PEM file: set ssl.truststore.type=PEM" in err
    assert "convert" not in err


@pytest.mark.skipif(shutil.which("keytool") is None, reason="needs the JDK's keytool")
def test_a_jks_truststore_is_told_how_to_convert_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import trustme

    pem, jks = tmp_path / "ca.pem", tmp_path / "trust.jks"
    trustme.CA().cert_pem.write_to_path(str(pem))
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(pem),
                    "-keystore", str(jks), "-storepass", "changeit", "-storetype", "JKS"],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    code, _, err = run(capsys, "topics", "list", "--bootstrap-server", "127.0.0.1:9",
                       "--command-config", _ssl_config(tmp_path, jks))  # fmt: skip
    assert code == 2, err
    assert "ssl.truststore.type JKS is not supported (Kafka's default" in err
    assert f"{jks} is a JKS keystore" in err and "keytool -exportcert -rfc" in err
    assert "set ssl.truststore.type=PEM" in err
