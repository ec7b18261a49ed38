"""The broker's side of SASL exchanges, driven by a real SCRAM client (``scramp``), and
Kafka's authentication bugs as regressions."""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable
from pathlib import Path

import pytest
import scramp

import sparklog.security.scram as scram_module
from sparklog.errors import AuthenticationError, IllegalSaslStateError
from sparklog.security.sasl import SaslExchange
from sparklog.security.scram import make_credential
from sparklog.security.store import CredentialStore
from sparklog.storage import Storage


@pytest.fixture
def creds(tmp_path: Path) -> CredentialStore:
    store = CredentialStore(Storage(str(tmp_path)))
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store.upsert("alice", make_credential(mech, "alice-pw"))
    return store


def scram_login(creds: CredentialStore, mech: str, user: str, password: str) -> SaslExchange:
    client = scramp.ScramClient([mech], user, password)
    server = SaslExchange(mech, creds)
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    return server


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_and_the_client_verifies_the_server(
    creds: CredentialStore, mech: str
) -> None:
    assert scram_login(creds, mech, "alice", "alice-pw").principal == "User:alice"


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "x")])
def test_scram_refuses_a_wrong_password_or_an_unknown_user_alike(
    creds: CredentialStore, user: str, password: str
) -> None:
    with pytest.raises(AuthenticationError, match="^Authentication failed: invalid credentials"):
        scram_login(creds, "SCRAM-SHA-256", user, password)


def test_plain_checks_the_stored_scram_credential(creds: CredentialStore) -> None:
    ok = SaslExchange("PLAIN", creds)
    ok.step(b"\0alice\0alice-pw")
    assert ok.principal == "User:alice"
    with pytest.raises(AuthenticationError):
        SaslExchange("PLAIN", creds).step(b"\0alice\0wrong")
    with pytest.raises(AuthenticationError, match="malformed"):
        SaslExchange("PLAIN", creds).step(b"alice-pw")


def test_an_authorization_id_other_than_the_username_is_refused(creds: CredentialStore) -> None:
    """CVE-2017-12610: authenticated as one user, acting as another."""
    with pytest.raises(AuthenticationError, match="authorization id must be the username"):
        SaslExchange("PLAIN", creds).step(b"admin\0alice\0alice-pw")
    client_first = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw").get_client_first()
    forged = client_first.replace("n,,", "n,a=admin,", 1)
    with pytest.raises(AuthenticationError, match="authorization id must be the username"):
        SaslExchange("SCRAM-SHA-256", creds).step(forged.encode())


def test_a_client_final_nonce_that_does_not_match_is_refused(creds: CredentialStore) -> None:
    """CVE-2024-56128: the client-final message must carry the nonce the server sent."""
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    server = SaslExchange("SCRAM-SHA-256", creds)
    server_first = server.step(client.get_client_first().encode()).decode()
    nonce = dict(kv.split("=", 1) for kv in server_first.split(","))["r"]
    # the proof is computed over a server-first carrying another nonce: a client replaying
    # or mixing exchanges
    other = server_first.replace(nonce, nonce[:-4] + "ABCD")
    client.set_server_first(other)
    with pytest.raises(AuthenticationError):
        server.step(client.get_client_final().encode())
    assert server.principal is None


def test_a_tampered_proof_is_refused(creds: CredentialStore) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-pw")
    server = SaslExchange("SCRAM-SHA-512", creds)
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    final = client.get_client_final()
    head, proof = final.rsplit("p=", 1)
    flipped = bytearray(base64.b64decode(proof))
    flipped[0] ^= 1
    with pytest.raises(AuthenticationError):
        server.step((head + "p=" + base64.b64encode(bytes(flipped)).decode()).encode())


def test_password_and_proof_comparisons_are_constant_time(
    creds: CredentialStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CVE-2021-38153: both PLAIN's password check and SCRAM's proof check compare with
    ``hmac.compare_digest``, never ``==``."""
    calls: list[str] = []
    real = hmac.compare_digest

    def recording(where: str) -> Callable[[bytes, bytes], bool]:
        def compare(a: bytes, b: bytes) -> bool:
            calls.append(where)
            return real(a, b)

        return compare

    monkeypatch.setattr(scram_module, "compare_digest", recording("plain"))
    monkeypatch.setattr(scramp.core, "compare_digest", recording("scram"))
    SaslExchange("PLAIN", creds).step(b"\0alice\0alice-pw")
    scram_login(creds, "SCRAM-SHA-256", "alice", "alice-pw")
    assert "plain" in calls and "scram" in calls


def test_tokens_after_the_exchange_completed_are_refused(creds: CredentialStore) -> None:
    done = scram_login(creds, "SCRAM-SHA-256", "alice", "alice-pw")
    with pytest.raises(IllegalSaslStateError):
        done.step(b"more")
