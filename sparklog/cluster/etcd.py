"""How sparklog reaches etcd: the endpoints, TLS and authentication, in one frozen value
(``EtcdSettings``) that every etcd client sparklog makes is built from (a broker's
membership, its epoch fence and its controller role, ``sparklog cluster describe``, the
test harness).

TLS: a ``ca_file`` (the CA bundle etcd's server certificate is checked against), and
``cert_file`` + ``key_file`` (this client's certificate, for an etcd started with
``--client-cert-auth``). TLS is on when any of them is given or the endpoints say
``https://``; then every endpoint is reached over TLS (gRPC checks the server certificate
names the endpoint's host).

Authentication: ``user`` and its password. The password never comes from the command line
(where ``ps`` shows it): ``password_file`` names a file holding it, else the environment
variable ``SPARKLOG_ETCD_PASSWORD`` (``from_options``). etcd answers a password with a
token (etcd's default ``--auth-token simple``: a token unused for ``--auth-token-ttl``
seconds, 300 by default, is forgotten); aetcd authenticates once per connection and never
again, so ``Coordination`` reconnects (authenticating anew) when etcd calls the token
invalid (``is_token_expired``): a broker idle past the TTL, e.g. one paused, goes on.

A refusal that retrying cannot cure - a certificate etcd or this client does not trust, a
wrong password, a user without permission on the cluster's keys - is told apart from an
etcd out of reach (``refusal``), so a broker stops with ``EtcdAccessError`` instead of
retrying it forever.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aetcd
import grpc
from aetcd import rpc

PASSWORD_ENV = "SPARKLOG_ETCD_PASSWORD"


def parse_endpoints(spec: str) -> list[tuple[str, str, int]]:
    """``[http[s]://]HOST:PORT[,...]`` -> [(scheme, host, port)] (scheme ``""`` when not
    given); ValueError on a malformed one."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        scheme, sep, rest = item.partition("://")
        if not sep:
            scheme, rest = "", item
        host, sep, port = rest.rpartition(":")
        if scheme not in ("", "http", "https"):
            raise ValueError(f"etcd endpoint {item!r}: the scheme must be http or https")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd endpoint {item!r} is not [http[s]://]HOST:PORT")
        out.append((scheme, host, int(port)))
    if not out:
        raise ValueError("no etcd endpoint given")
    return out


def read_password(password_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The etcd password: the first line of ``password_file`` if given (a missing file is
    an error), else ``SPARKLOG_ETCD_PASSWORD``, else None."""
    if password_file:
        try:
            with open(password_file, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"etcd password file {password_file}: {e.strerror}") from None
    return environ.get(PASSWORD_ENV) or None


@dataclass(frozen=True)
class EtcdSettings:
    """Where etcd is and how to prove who this client is (see the module docstring)."""

    endpoints: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        schemes = {s for s, _, _ in parse_endpoints(self.endpoints)}
        if schemes >= {"http", "https"}:
            raise ValueError(f"etcd endpoints {self.endpoints}: all http or all https")
        if "http" in schemes and (self.ca_file or self.cert_file):
            raise ValueError(
                f"etcd endpoints {self.endpoints} are http: a CA or client "
                "certificate needs https (or no scheme)"
            )
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("etcd_cert_file and etcd_key_file go together (mutual TLS)")
        if self.user and self.password is None:
            raise ValueError(
                f"etcd user {self.user!r} needs a password: etcd_password_file "
                f"or the environment variable {PASSWORD_ENV}"
            )
        if self.password is not None and not self.user:
            raise ValueError("an etcd password needs etcd_user")
        for what, path in (
            ("etcd_ca_file", self.ca_file),
            ("etcd_cert_file", self.cert_file),
            ("etcd_key_file", self.key_file),
        ):
            if path and not os.path.isfile(path):
                raise ValueError(f"{what} {path}: no such file")

    @classmethod
    def from_options(
        cls,
        endpoints: str,
        *,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        user: str | None = None,
        password_file: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> EtcdSettings:
        """The settings of the ``--etcd-*`` options (``etcd_*`` TOML keys), the password
        read from ``password_file`` or ``SPARKLOG_ETCD_PASSWORD`` (only if ``user``)."""
        env = os.environ if environ is None else environ
        if password_file and not user:
            raise ValueError("etcd_password_file needs etcd_user")
        password = read_password(password_file, env) if user else None
        return cls(endpoints, ca_file, cert_file, key_file, user, password)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(h, p) for _, h, p in parse_endpoints(self.endpoints)]

    @property
    def tls(self) -> bool:
        https = any(s == "https" for s, _, _ in parse_endpoints(self.endpoints))
        return https or bool(self.ca_file or self.cert_file)

    def where(self) -> str:
        """The endpoints as a user reads them (``https://`` on each over TLS)."""
        scheme = "https://" if self.tls else ""
        return ",".join(f"{scheme}{h}:{p}" for h, p in self.addresses)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """gRPC's TLS credentials (None without TLS); the files are read now."""
        if not self.tls:
            return None

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            read(self.ca_file), read(self.key_file), read(self.cert_file)
        )

    def client(self, host: str, port: int, timeout_s: float) -> aetcd.Client:
        """An unconnected aetcd client of one endpoint (``connect()`` authenticates)."""
        return EtcdClient(
            self.credentials(),
            host=host,
            port=port,
            username=self.user,
            password=self.password,
            timeout=timeout_s,
        )


class EtcdClient(aetcd.Client):  # type: ignore[misc]  # aetcd has no type hints
    """aetcd's client over a TLS channel when given ``credentials``: aetcd 1.0 opens only
    plaintext channels (``connect`` is aetcd's own, with ``secure_channel``)."""

    def __init__(self, credentials: grpc.ChannelCredentials | None, **kw: Any) -> None:
        super().__init__(**kw)
        self._credentials = credentials

    async def connect(self) -> None:
        if self._credentials is None:
            await super().connect()
            return
        if self._connected.is_set():
            return
        # unlike aetcd's, a call made while another connects does not wait for it:
        # Coordination connects a client before any call can reach it
        try:
            channel = rpc.secure_channel(
                f"{self._host}:{self._port}", self._credentials, options=self._options.items()
            )
            self.channel = channel
            if self._username is not None:
                self.auth_stub = rpc.AuthStub(channel)
                resp = await self.auth_stub.Authenticate(
                    rpc.AuthenticateRequest(name=self._username, password=self._password),
                    timeout=self._timeout,
                )
                self.metadata = (("token", resp.token),)
            self.kvstub = rpc.KVStub(channel)
            self.clusterstub = rpc.ClusterStub(channel)
            self.leasestub = rpc.LeaseStub(channel)
            self.maintenancestub = rpc.MaintenanceStub(channel)
            self._watcher = aetcd.watcher.Watcher(
                rpc.WatchStub(channel), timeout=self._timeout, metadata=self.metadata
            )
            self._connected.set()
        except rpc.AioRpcError as e:
            aetcd.exceptions._handle_exception(e)


# what etcd and gRPC say when retrying cannot help: (a word in the message, what it means)
_REFUSALS = (
    ("CERTIFICATE_VERIFY_FAILED", "etcd's server certificate is not trusted by etcd_ca_file"),
    (
        "handshake failed",
        "the TLS handshake failed (check etcd_ca_file against etcd's "
        "server certificate, and that etcd speaks TLS)",
    ),
    (
        "TSI_DATA_CORRUPTED",
        "etcd closed the TLS connection: it wants a client certificate "
        "it trusts (etcd_cert_file, etcd_key_file)",
    ),
    (
        "authentication failed",
        "etcd refused the user or password (etcd_user, "
        "etcd_password_file or SPARKLOG_ETCD_PASSWORD)",
    ),
    ("user name is empty", "etcd has authentication enabled: give etcd_user and a password"),
    (
        "permission denied",
        "the etcd user (or the client certificate's common name) has "
        "no permission on the cluster's keys",
    ),
    ("authentication is not enabled", "etcd has authentication disabled: drop etcd_user"),
)


def refusal(error: BaseException) -> str | None:
    """Why etcd (or the TLS layer in front of it) refused this client, if ``error`` says
    it did; None for anything retrying may cure (etcd out of reach, slow, no leader)."""
    text = str(error)
    for word, meaning in _REFUSALS:
        if word.lower() in text.lower():
            return meaning
    return None


def is_token_expired(error: BaseException) -> bool:
    """etcd no longer knows this connection's auth token (unused past ``--auth-token-ttl``,
    or the member restarted): authenticating again cures it."""
    return "invalid auth token" in str(error)
