"""SaslHandshake v0 on a real broker process: older librdkafka (the kcat Debian ships,
librdkafka 2.0.2) over SASL_SSL, and the raw-token exchange a v0 handshake starts (KIP-152:
tokens framed only by their 4-byte size, no request header).

Kafka's behaviour was checked against Apache Kafka 4.3.1 (single-node KRaft from the jars,
a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-512): it advertises SaslHandshake
v0-v1; after a v0 handshake it answers each raw token with a raw token (an empty one when
PLAIN succeeds), closes the connection without an answer when the exchange fails, and
answers a second handshake on an authenticated connection with ILLEGAL_SASL_STATE,
serving the connection on. The same kcat authenticates with PLAIN there and is refused
with SCRAM-SHA-512 ("invalid credentials": librdkafka before 2.6.1 repeats its own nonce
in the client-final message, which Kafka 4's nonce check refuses, CVE-2024-56128)."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import scramp
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.kafka import wire
from sparklog.kafka.wire import ApiKey
from tests.broker.secure import SecureBroker, start_secure_broker

KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed")


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureBroker]:
    s = start_secure_broker(tmp_path)
    try:
        yield s
    finally:
        s.broker.stop()
        s.broker.kill()


def _kcat(s: SecureBroker, mechanism: str, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """kcat over SASL_SSL as admin; (exit status, stdout, stderr)."""
    assert KCAT is not None
    done = subprocess.run(
        [KCAT, "-b", s.broker.address("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
         "-X", f"ssl.ca.location={s.ca_file}", "-X", f"sasl.mechanisms={mechanism}",
         "-X", "sasl.username=admin", "-X", "sasl.password=admin-secret",
         "-m", "20", *args],
        input=stdin, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@needs_kcat
def test_debian_kcat_produces_and_consumes_over_sasl_ssl(secure: SecureBroker) -> None:
    """librdkafka 2.0.2 enables its SASL support only if SaslHandshake v0 is in the
    advertised range; it then authenticates with v1 and SaslAuthenticate."""
    admin = AdminClient(secure.confluent("SASL_SSL"))
    admin.create_topics([NewTopic("legacy", 1)])["legacy"].result(30)
    code, _, err = _kcat(secure, "PLAIN", "-P", "-t", "legacy", "-p", "0",
                         stdin=b"one\ntwo\nthree\n")  # fmt: skip
    assert code == 0, err
    code, out, err = _kcat(secure, "PLAIN", "-C", "-t", "legacy", "-p", "0",
                           "-o", "beginning", "-c", "3", "-e")  # fmt: skip
    assert code == 0, err
    assert out.splitlines() == ["one", "two", "three"]


@needs_kcat
def test_debian_kcat_with_scram_is_refused_at_the_nonce_check_as_kafka_refuses_it(
    secure: SecureBroker,
) -> None:
    code, _, err = _kcat(secure, "SCRAM-SHA-512", "-L")
    assert code != 0
    assert "Handshake not supported" not in err
    assert "Authentication failed" in err and "invalid credentials" in err


def _socket(s: SecureBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", s.broker.endpoints["SASL_PLAINTEXT"]),
                                    timeout=10)  # fmt: skip


def _read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame's body, or None if the broker closed the connection."""
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    (size,) = struct.unpack(">i", data)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def _handshake_v0(sock: socket.socket, mechanism: str) -> int:
    sock.sendall(wire.encode_request(ApiKey.SASL_HANDSHAKE, 0, 1, {"mechanism": mechanism}))
    frame = _read_frame(sock)
    assert frame is not None
    _, resp = wire.decode_response(ApiKey.SASL_HANDSHAKE, 0, frame)
    return int(resp.error_code)


def _token(sock: socket.socket, token: bytes) -> bytes | None:
    sock.sendall(struct.pack(">i", len(token)) + token)
    return _read_frame(sock)


def _metadata(sock: socket.socket) -> bytes | None:
    sock.sendall(wire.encode_request(ApiKey.METADATA, 1, 9, {"topics": []}))
    return _read_frame(sock)


def test_advertised_range_of_saslhandshake_is_kafkas(secure: SecureBroker) -> None:
    with _socket(secure) as sock:
        sock.sendall(wire.encode_request(ApiKey.API_VERSIONS, 0, 1, {}))
        frame = _read_frame(sock)
        assert frame is not None
        _, resp = wire.decode_response(ApiKey.API_VERSIONS, 0, frame)
    versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    assert versions[ApiKey.SASL_HANDSHAKE] == (0, 1)


def test_a_v0_handshake_exchanges_raw_scram_tokens_then_serves_requests(
    secure: SecureBroker,
) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-512"], "admin", "admin-secret")
    with _socket(secure) as sock:
        assert _handshake_v0(sock, "SCRAM-SHA-512") == 0
        server_first = _token(sock, client.get_client_first().encode())
        assert server_first is not None
        client.set_server_first(server_first.decode())
        server_final = _token(sock, client.get_client_final().encode())
        assert server_final is not None
        client.set_server_final(server_final.decode())  # raises unless the server proved itself
        assert _metadata(sock) is not None


def test_a_v0_plain_exchange_is_answered_with_an_empty_token(secure: SecureBroker) -> None:
    with _socket(secure) as sock:
        assert _handshake_v0(sock, "PLAIN") == 0
        assert _token(sock, b"\0admin\0admin-secret") == b""
        assert _metadata(sock) is not None


def test_a_failed_v0_exchange_closes_the_connection_without_an_answer(
    secure: SecureBroker,
) -> None:
    with _socket(secure) as sock:
        assert _handshake_v0(sock, "PLAIN") == 0
        assert _token(sock, b"\0admin\0wrong") is None
    with _socket(secure) as sock:  # a Kafka request instead of a token is a bad token
        assert _handshake_v0(sock, "SCRAM-SHA-512") == 0
        assert _metadata(sock) is None


def test_a_second_handshake_on_an_authenticated_v0_connection_is_illegal(
    secure: SecureBroker,
) -> None:
    with _socket(secure) as sock:
        assert _handshake_v0(sock, "PLAIN") == 0
        assert _token(sock, b"\0admin\0admin-secret") == b""
        assert _handshake_v0(sock, "PLAIN") == 34  # ILLEGAL_SASL_STATE
        assert _metadata(sock) is not None
