"""One connection's SASL exchange: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

``SaslExchange(mechanism, credentials)`` is created by SaslHandshake and fed each
SaslAuthenticate token with ``step``: it returns the bytes to answer with and, once the
client has proven who it is, sets ``principal`` (``User:<name>``). Any failure raises
``AuthenticationError`` with a message that does not say whether the user exists.

Kafka's security bugs this guards against:

- PLAIN's authorization id must be empty or the username itself (CVE-2017-12610: a client
  authenticated as one user acting as another); SCRAM's ``a=`` likewise.
- SCRAM's client-final nonce must be the one the server sent (CVE-2024-56128): ``scramp``
  checks it, and a test replays a mismatched nonce.
- Password and proof comparisons are constant-time (CVE-2021-38153): ``hmac.compare_digest``
  here and in ``scramp``.
"""

from __future__ import annotations

import scramp

from sparklog.errors import AuthenticationError, IllegalSaslStateError
from sparklog.security.scram import MECHANISMS
from sparklog.security.store import CredentialStore

PLAIN = "PLAIN"
ALL_MECHANISMS = (PLAIN, *MECHANISMS)
_FAILED = "Authentication failed: invalid credentials with SASL mechanism {}"


def _decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``."""
    return name.replace("=2C", ",").replace("=3D", "=")


class SaslExchange:
    """See the module docstring."""

    def __init__(self, mechanism: str, credentials: CredentialStore) -> None:
        self.mechanism = mechanism
        self.credentials = credentials
        self.principal: str | None = None
        self.user = ""
        self._scram: scramp.core.ScramServer | None = None
        self._stage = 0

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def _fail(self, why: str = "") -> AuthenticationError:
        return AuthenticationError(_FAILED.format(self.mechanism) + (f" ({why})" if why else ""))

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("the SASL exchange is already complete")
        if self.mechanism == PLAIN:
            return self._plain(token)
        return self._scram_step(token)

    def _plain(self, token: bytes) -> bytes:
        try:
            authzid, user, password = token.decode("utf-8").split("\0")
        except ValueError as e:
            raise AuthenticationError(
                "PLAIN: malformed message (expected authzid NUL username NUL password)"
            ) from e
        if not user or not password:
            raise AuthenticationError("PLAIN: username and password must not be empty")
        if authzid and authzid != user:
            raise AuthenticationError("PLAIN: the authorization id must be the username")
        creds = self.credentials.users().get(user, {})
        # every stored mechanism is checked the same way, so an unknown user takes as
        # long as a known one with a wrong password
        cred = next(iter(creds.values()), None)
        ok = cred.check_password(password) if cred is not None else False
        if not ok:
            raise self._fail()
        self.user, self.principal = user, f"User:{user}"
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._fail("not UTF-8") from e
        if self._stage == 0:
            return self._client_first(message)
        if self._stage == 1:
            assert self._scram is not None
            try:
                self._scram.set_client_final(message)
                final = self._scram.get_server_final()
            except scramp.ScramException as e:
                raise self._fail() from e
            self.principal = f"User:{self.user}"
            return str(final).encode()
        raise IllegalSaslStateError("unexpected SASL token")

    def _client_first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        if len(parts) < 3:
            raise self._fail("malformed client-first message")
        authzid = parts[1]
        bare = dict(([*kv.split("=", 1), ""])[:2] for kv in parts[2].split(",") if kv)
        user = _decode_saslname(bare.get("n", ""))
        if not user:
            raise self._fail("no username")
        if authzid and _decode_saslname(authzid.removeprefix("a=")) != user:
            raise AuthenticationError(f"SCRAM: the authorization id must be the username {user!r}")
        cred = self.credentials.get(user, self.mechanism)

        def lookup(_name: str) -> tuple[bytes, bytes, bytes, int]:
            if cred is None:
                raise scramp.ScramException("unknown user")
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        server = scramp.ScramMechanism(self.mechanism).make_server(lookup)
        try:
            server.set_client_first(message)
            first = server.get_server_first()
        except scramp.ScramException as e:
            raise self._fail() from e
        self._scram, self.user, self._stage = server, user, 1
        return str(first).encode()
