"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka keeps them: salted, never the password.

A credential is what the server needs to check a SCRAM exchange: the salt, the iteration
count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey =
HMAC(SaltedPassword, "Server Key")`` with ``SaltedPassword = PBKDF2(password, salt, i)``.
The password is UTF-8 encoded as Kafka's ``ScramFormatter`` does it (no SASLprep), so
credentials made by Kafka's tools and by clients that salt the password themselves
(``AlterUserScramCredentials`` sends the salted password) agree. PLAIN is checked against
the same credential: the password is salted with the stored salt and count and its
StoredKey compared, in constant time (``hmac.compare_digest``; CVE-2021-38153).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from hmac import compare_digest
from typing import Any

#: mechanism -> (hash name, Kafka's ScramMechanism code in the user SCRAM APIs)
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
MIN_ITERATIONS = 4096  # Kafka's minimum for both mechanisms
MAX_ITERATIONS = 16384  # Kafka's maximum
DEFAULT_ITERATIONS = 4096


def mechanism_name(code: int) -> str:
    for name, (_, c) in MECHANISMS.items():
        if c == code:
            return name
    raise ValueError(f"unknown SCRAM mechanism code {code}")


def check_mechanism(mechanism: str) -> str:
    name = mechanism.upper()
    if name not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})")
    return name


def check_iterations(iterations: int) -> int:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"SCRAM iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}"
        )
    return iterations


@dataclass(frozen=True)
class ScramCredential:
    """One user's credential for one mechanism (see the module docstring)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, mechanism: str, d: dict[str, Any]) -> ScramCredential:
        b64 = base64.b64decode
        return cls(
            mechanism,
            b64(d["salt"]),
            b64(d["stored_key"]),
            b64(d["server_key"]),
            int(d["iterations"]),
        )

    def check_password(self, password: str) -> bool:
        """Whether ``password`` is this credential's (constant-time comparison)."""
        other = make_credential(self.mechanism, password, self.iterations, self.salt)
        return compare_digest(other.stored_key, self.stored_key)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    algo = MECHANISMS[check_mechanism(mechanism)][0]
    return hashlib.pbkdf2_hmac(algo, password.encode("utf-8"), salt, iterations)


def from_salted_password(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential for an already salted password (``AlterUserScramCredentials``)."""
    mechanism = check_mechanism(mechanism)
    algo = MECHANISMS[mechanism][0]
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    stored_key = hashlib.new(algo, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def make_credential(
    mechanism: str,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` (a random 32-byte salt unless given)."""
    if not password:
        raise ValueError("a SCRAM password must not be empty")
    check_iterations(iterations)
    salt = os.urandom(32) if salt is None else salt
    return from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )
