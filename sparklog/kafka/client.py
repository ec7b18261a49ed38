"""sparklog's own Kafka client: one blocking connection, one request at a time.

Used where sparklog talks to a broker itself: the CLI's admin calls (``sparklog.kafka.admin``,
``sparklog.kafka.security_admin``), the Spark source's group commits and READ checks, the
Spark sink's producer, and the protocol tests. Applications use real Kafka clients instead.

``ClientSettings`` is the one place for how to connect: the bootstrap servers (tried in
order until one answers), the timeout, the client id, and connection security: the
security protocol (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``), the SASL
mechanism and credentials (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``), and PEM files
for TLS (the CA to trust, and a client certificate and key for mutual TLS). Every caller
that connects elsewhere (a partition leader, a group coordinator) uses ``with_bootstrap``,
so the security settings go wherever the client goes. ``from_options`` reads Kafka's
option names as Spark's Kafka source passes them (also librdkafka's), and
``parse_properties`` reads a Kafka tool's ``--command-config`` file.

Connecting: TCP, then TLS for ``SSL``/``SASL_SSL`` (the server's certificate checked
against the CA file, or the system's CAs, and its host name unless
``ssl.endpoint.identification.algorithm`` is empty), then for ``SASL_*`` a SaslHandshake
(v1) and SaslAuthenticate (v2) rounds: one for PLAIN, two for SCRAM (RFC 5802, the
server's signature checked). A refusal raises ``AuthenticationError`` with the broker's
message.

``request`` sends a request built from plain data (``wire.build`` fits it to the version)
and returns the parsed kio response; ``send`` and ``receive`` are its two halves, for
callers that pipeline.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    KafkaConnectionError,
    UnsupportedSaslMechanismError,
)
from sparklog.kafka import wire
from sparklog.kafka.address import parse_bootstrap, uses_sasl, uses_tls
from sparklog.kafka.wire import ApiKey

_SIZE = struct.Struct(">i")
DEFAULT_TIMEOUT_S = 30.0
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
}


@dataclass(frozen=True)
class ClientSettings:
    """How sparklog's client connects (see the module docstring). Plain data: pickled to
    Spark executors. Passwords never show in ``repr``."""

    bootstrap: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    client_id: str = "sparklog"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    #: Kafka's ``ssl.endpoint.identification.algorithm``: ``https`` (True) or empty (False)
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap)  # a bad address fails here, where it was given
        if self.timeout_s <= 0:
            raise ValueError(f"client timeout must be positive, got {self.timeout_s}")
        protocol = str(self.security_protocol).strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"unknown security protocol {self.security_protocol!r} "
                f"(Kafka's are {', '.join(SECURITY_PROTOCOLS)})"
            )
        mechanism = str(self.sasl_mechanism).strip().upper()
        object.__setattr__(self, "security_protocol", protocol)
        object.__setattr__(self, "sasl_mechanism", mechanism)
        if self.sasl:
            if mechanism not in SASL_MECHANISMS:
                raise ValueError(
                    f"unknown SASL mechanism {self.sasl_mechanism!r} "
                    f"(supported: {', '.join(SASL_MECHANISMS)})"
                )
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError(
                    f"security protocol {protocol} needs a SASL user name and password "
                    "(sasl.jaas.config, or sasl.username and sasl.password)"
                )
        elif self.sasl_username is not None or self.sasl_password is not None:
            raise ValueError(
                f"a SASL user name or password was given, but security protocol {protocol} "
                "does not use SASL (use SASL_PLAINTEXT or SASL_SSL)"
            )
        ssl_files = (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
        if not self.tls and any(f is not None for f in ssl_files):
            raise ValueError(
                f"TLS files were given, but security protocol {protocol} does not use TLS "
                "(use SSL or SASL_SSL)"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("a TLS client key (ssl.key.location) needs its certificate too")

    @property
    def tls(self) -> bool:
        return uses_tls(self.security_protocol)

    @property
    def sasl(self) -> bool:
        return uses_sasl(self.security_protocol)

    @property
    def principal(self) -> str:
        """Who the broker will see, for messages: ``User:NAME``, or what TLS says."""
        if self.sasl:
            return f"User:{self.sasl_username}"
        if self.ssl_certfile:
            return f"the principal of TLS client certificate {self.ssl_certfile}"
        return "User:ANONYMOUS"

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], *, client_id: str = "sparklog"
    ) -> ClientSettings:
        """Settings from Kafka client options (``kafka.`` prefix optional, names
        case-insensitive): ``bootstrap.servers`` (required), ``client.id``,
        ``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config`` (Plain or Scram
        login module), librdkafka's ``sasl.username``/``sasl.password``, PEM files as
        ``ssl.truststore.location`` (with ``ssl.truststore.type=PEM``) or
        ``ssl.ca.location``, ``ssl.keystore.location`` (``ssl.keystore.type=PEM``: key and
        certificate in one file) or ``ssl.certificate.location`` and ``ssl.key.location``,
        ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``. Options that the
        security protocol does not use are ignored, as Kafka's clients ignore them."""
        opts = {k.lower().removeprefix("kafka."): str(v) for k, v in options.items()}
        bootstrap = opts.get("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ValueError("kafka.bootstrap.servers is required")
        protocol = opts.get("security.protocol", "PLAINTEXT").strip().upper()
        found: dict[str, Any] = {"security_protocol": protocol}
        if protocol.startswith("SASL_"):
            found |= _sasl_options(opts)
        if protocol in ("SSL", "SASL_SSL"):
            found |= _ssl_options(opts)
        return cls(bootstrap, client_id=opts.get("client.id", client_id), **found)

    def with_timeout(self, timeout_s: float) -> ClientSettings:
        return dataclasses.replace(self, timeout_s=timeout_s)

    def with_bootstrap(self, address: str) -> ClientSettings:
        """The same settings (security included) for another broker."""
        return dataclasses.replace(self, bootstrap=address)


def _sasl_options(opts: Mapping[str, str]) -> dict[str, Any]:
    mechanism = (opts.get("sasl.mechanism") or opts.get("sasl.mechanisms") or "").strip().upper()
    user, password = opts.get("sasl.username"), opts.get("sasl.password")
    jaas = opts.get("sasl.jaas.config", "").strip()
    if jaas:
        module, values = parse_jaas_config(jaas)
        kind = _LOGIN_MODULES.get(module)
        if kind is None:
            raise ValueError(
                f"sasl.jaas.config: login module {module} is not supported (use "
                + " or ".join(_LOGIN_MODULES)
                + ")"
            )
        if not mechanism:
            if kind != "PLAIN":
                raise ValueError(
                    "sasl.jaas.config uses the ScramLoginModule: set sasl.mechanism to "
                    "SCRAM-SHA-256 or SCRAM-SHA-512"
                )
            mechanism = "PLAIN"
        if not mechanism.startswith(kind):
            raise ValueError(
                f"sasl.jaas.config uses {module.rpartition('.')[2]}, which does not do "
                f"sasl.mechanism {mechanism}"
            )
        user, password = values.get("username", user), values.get("password", password)
    return {
        "sasl_mechanism": mechanism or "PLAIN",
        "sasl_username": user,
        "sasl_password": password,
    }


_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_CONVERT = {
    "truststore": "keytool -exportcert -rfc -alias ALIAS -keystore {0} > ca.pem",
    "keystore": "keytool -importkeystore -srckeystore {0} -destkeystore k.p12 "
    "-deststoretype PKCS12, then openssl pkcs12 -in k.p12 -nodes > me.pem",
}


def _store_kind(location: str) -> str:
    """What the file at ``location`` holds: "PEM", "JKS", "PKCS12" or "" (unknown or
    unreadable), from its first bytes."""
    try:
        with open(location, "rb") as f:
            head = f.read(4096)
    except OSError:
        return ""
    if head.startswith(_JKS_MAGIC):
        return "JKS"
    if b"-----BEGIN " in head:
        return "PEM"
    return "PKCS12" if head[:1] == b"\x30" else ""  # DER: a SEQUENCE


def _pem_only(opts: Mapping[str, str], store: str) -> str | None:
    location = opts.get(f"ssl.{store}.location", "").strip() or None
    given = opts.get(f"ssl.{store}.type", "").strip().upper()
    kind = given or "JKS"  # Kafka's default type
    if location is not None and kind != "PEM":
        # Kafka refuses a PEM file under type JKS too ("Invalid keystore format"): say
        # which of the two to change, after a look at the file
        found = _store_kind(location)
        said = f"ssl.{store}.type {kind}"
        note = "" if given else f" (Kafka's default when ssl.{store}.type is not set)"
        if found == "PEM":
            raise ValueError(
                f"{said}{note} does not fit {location}, which is already a PEM file: set "
                f"ssl.{store}.type=PEM"
            )
        if not found and not os.path.isfile(location):
            raise ValueError(
                f"{said} is not supported{note}, and {location} is no file: "
                f"give a PEM file and set ssl.{store}.type=PEM"
            )
        what = f"{location} is a {found} keystore" if found else f"{location} is not PEM"
        raise ValueError(
            f"{said} is not supported{note}: sparklog's client reads PEM files only, and "
            f"{what}; "
            f"convert it (e.g. {_CONVERT[store].format(location)}) and set "
            f"ssl.{store}.type=PEM"
        )
    for inline in (f"ssl.{store}.certificates", f"ssl.{store}.certificate.chain"):
        if opts.get(inline):
            raise ValueError(f"{inline} (PEM inline) is not supported: give a file")
    return location


def _ssl_options(opts: Mapping[str, str]) -> dict[str, Any]:
    cafile = opts.get("ssl.ca.location", "").strip() or _pem_only(opts, "truststore")
    keystore = _pem_only(opts, "keystore")
    certfile = opts.get("ssl.certificate.location", "").strip() or keystore
    keyfile = opts.get("ssl.key.location", "").strip() or None
    algorithm = opts.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "", "none"):
        raise ValueError(
            f"ssl.endpoint.identification.algorithm must be https or empty, got {algorithm!r}"
        )
    return {
        "ssl_cafile": cafile,
        "ssl_certfile": certfile,
        "ssl_keyfile": keyfile,
        "ssl_key_password": opts.get("ssl.key.password") or None,
        "ssl_check_hostname": algorithm == "https",
    }


_JAAS = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*)", re.S)
_JAAS_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))', re.S)


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """``(login module, options)`` of a Kafka ``sasl.jaas.config`` value, e.g.
    ``org.apache.kafka.common.security.plain.PlainLoginModule required username="u"
    password="p";`` (quoted values may hold ``\\"`` and ``\\\\``). ValueError otherwise."""
    m = _JAAS.fullmatch(text.strip())
    if not m:
        raise ValueError(
            "sasl.jaas.config must be 'LoginModule required key=\"value\" ...;', "
            f"got {_redact(text)!r}"
        )
    module, rest = m.group(1), m.group(3).strip()
    if not rest.endswith(";"):
        raise ValueError("sasl.jaas.config must end with ';'")
    rest = rest[:-1]
    values: dict[str, str] = {}
    pos = 0
    while rest[pos:].strip():
        om = _JAAS_OPTION.match(rest, pos)
        if not om:
            raise ValueError(
                f"sasl.jaas.config: cannot read the options after {module} "
                f"(at {_redact(rest[pos:])!r})"
            )
        quoted = om.group(2)
        values[om.group(1)] = (
            re.sub(r"\\(.)", r"\1", quoted, flags=re.S) if quoted is not None else om.group(3)
        )
        pos = om.end()
    return module, values


def _redact(text: str) -> str:
    """``text`` with password values hidden (for error messages)."""
    return re.sub(r'(password\s*=\s*)("(?:[^"\\]|\\.)*"|\S+)', r"\1***", text, flags=re.I)


def parse_properties(text: str) -> dict[str, str]:
    """The entries of a Java properties file (a Kafka tool's ``--command-config``):
    ``key=value`` or ``key: value``, ``#``/``!`` comments, a ``\\`` at the end of a line
    continues it. Later entries win."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes: continued
            pending += line[:-1]
            continue
        _property(out, pending + line)
        pending = ""
    if pending:
        _property(out, pending)
    return out


_PROPERTY = re.compile(r"((?:[^\s=:\\]|\\.)*)\s*[=:]?\s*(.*)", re.S)


def _property(out: dict[str, str], line: str) -> None:
    m = _PROPERTY.fullmatch(line)
    assert m is not None  # the pattern matches any string
    out[_unescape(m.group(1))] = _unescape(m.group(2))


def _unescape(value: str) -> str:
    table = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(1)), value)


# ---------------------------------------------------------------------------- the client


def ssl_context(settings: ClientSettings) -> ssl.SSLContext:
    """The TLS context of ``settings``: its CA file (else the system's CAs), its client
    certificate for mutual TLS, host name checking as configured."""
    try:
        ctx = ssl.create_default_context(cafile=settings.ssl_cafile)
        if settings.ssl_certfile is not None:
            ctx.load_cert_chain(
                settings.ssl_certfile, settings.ssl_keyfile, settings.ssl_key_password
            )
    except (OSError, ssl.SSLError) as e:
        files = [f for f in (settings.ssl_cafile, settings.ssl_certfile, settings.ssl_keyfile) if f]
        raise ValueError(f"cannot load the TLS files {files}: {e}") from None
    ctx.check_hostname = settings.ssl_check_hostname
    return ctx


class KafkaClient:
    """See the module docstring. Use as a context manager."""

    def __init__(self, settings: ClientSettings | str, *, timeout_s: float | None = None) -> None:
        if isinstance(settings, str):
            settings = ClientSettings(settings)
        if timeout_s is not None:
            settings = settings.with_timeout(timeout_s)
        self.settings = settings
        self.client_id = settings.client_id
        self._correlation = 0
        self._answered = False  # whether any response came: a hint for a closed connection
        self.sock = self._connect()
        if settings.sasl:
            try:
                self._authenticate()
            except BaseException:
                self.sock.close()
                raise

    def _connect(self) -> socket.socket:
        failures = []
        ctx = ssl_context(self.settings) if self.settings.tls else None
        for host, port in parse_bootstrap(self.settings.bootstrap):
            try:
                sock = socket.create_connection((host, port), timeout=self.settings.timeout_s)
            except OSError as e:
                failures.append(f"{host}:{port}: {e}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ctx is None:
                return sock
            try:
                return ctx.wrap_socket(sock, server_hostname=host)
            except ssl.SSLCertVerificationError as e:
                sock.close()
                raise AuthenticationError(
                    f"TLS with {host}:{port}: the broker's certificate is not trusted: "
                    f"{e.verify_message} (ssl.truststore.location / ssl.ca.location; "
                    "ssl.endpoint.identification.algorithm)"
                ) from None
            except (OSError, ssl.SSLError) as e:
                sock.close()
                failures.append(f"{host}:{port}: TLS handshake failed: {e}")
        raise KafkaConnectionError("cannot connect to a broker at " + "; ".join(failures))

    # ------------------------------------------------------------------ SASL

    def _authenticate(self) -> None:
        """SaslHandshake, then the mechanism's SaslAuthenticate rounds (module docstring)."""
        s = self.settings
        where = f"SASL {s.sasl_mechanism} as {s.sasl_username!r}"
        hs = self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": s.sasl_mechanism})
        if hs.error_code == ErrorCode.unsupported_sasl_mechanism:
            raise UnsupportedSaslMechanismError(
                f"{where}: the broker's listener does not enable {s.sasl_mechanism} "
                f"(it enables {', '.join(hs.mechanisms) or 'none'})"
            )
        if hs.error_code == ErrorCode.illegal_sasl_state:
            raise IllegalSaslStateError(f"{where}: the broker refused the SASL handshake")
        if hs.error_code != ErrorCode.none:
            raise AuthenticationError(f"{where}: SaslHandshake answered {hs.error_code.name}")
        assert s.sasl_username is not None and s.sasl_password is not None
        if s.sasl_mechanism == "PLAIN":
            token = b"\0" + s.sasl_username.encode() + b"\0" + s.sasl_password.encode()
            self._sasl_round(where, token)
            return
        from scramp import ScramClient, ScramException

        scram = ScramClient([s.sasl_mechanism], s.sasl_username, s.sasl_password)
        try:
            server_first = self._sasl_round(where, scram.get_client_first().encode())
            scram.set_server_first(server_first.decode())
            server_final = self._sasl_round(where, scram.get_client_final().encode())
            scram.set_server_final(server_final.decode())
        except (ScramException, UnicodeDecodeError) as e:
            raise AuthenticationError(f"{where}: bad SCRAM exchange with the broker: {e}") from e

    def _sasl_round(self, where: str, token: bytes) -> bytes:
        resp = self.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if resp.error_code != ErrorCode.none:
            raise AuthenticationError(
                f"{where}: {resp.error_message or resp.error_code.name.upper()}"
            )
        return bytes(resp.auth_bytes)

    # ------------------------------------------------------------------ requests

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                hint = ""
                if not self._answered and not self.settings.sasl:
                    hint = (
                        " before answering: if its listener is SSL, SASL_PLAINTEXT or "
                        "SASL_SSL, set security.protocol (and the SASL or TLS settings)"
                    )
                raise KafkaConnectionError("the broker closed the connection" + hint)
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Write one request (a kio entity or plain data); returns its correlation id."""
        self._correlation += 1
        frame = wire.encode_request(
            api_key, version, self._correlation, body, client_id=self.client_id
        )
        self.sock.sendall(frame)
        return self._correlation

    def receive(self, api_key: int, version: int, correlation_id: int | None = None) -> Any:
        """Read one response frame and parse it as the response of ``api_key``/``version``."""
        (size,) = _SIZE.unpack(self._recv_exact(4))
        correlation, body = wire.decode_response(api_key, version, self._recv_exact(size))
        self._answered = True
        if correlation_id is not None and correlation != correlation_id:
            raise KafkaConnectionError(
                f"response correlation id {correlation}, expected {correlation_id}"
            )
        return body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return its parsed response."""
        return self.receive(api_key, version, self.send(api_key, version, body))
