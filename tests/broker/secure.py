"""A secured broker for tests: TLS certificates from a throwaway CA (``trustme``), users
created offline before the broker starts (as ``sparklog users add`` does), and every
listener at once (SASL_SSL, SASL_PLAINTEXT, SSL, PLAINTEXT); and a confluent-kafka producer
and consumer configured for it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from confluent_kafka import Consumer, KafkaError, Producer

from sparklog.kafka.client import ClientSettings
from sparklog.security.scram import make_credential
from sparklog.security.store import CredentialStore
from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerProcess

ALL_LISTENERS = (
    "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"
)
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class SecureBroker:
    """Paths and a started ``BrokerProcess`` (see the module docstring)."""

    broker: BrokerProcess
    ca_file: str
    client_cert: str  # a client certificate (CN=carol) signed by the same CA: mTLS
    users: dict[str, str] = field(default_factory=lambda: dict(USERS))

    def confluent(self, protocol: str, user: str | None = "admin",
                  mechanism: str = "SCRAM-SHA-256", **extra: Any) -> dict[str, Any]:  # fmt: skip
        """confluent-kafka settings for ``protocol`` as ``user``."""
        conf: dict[str, Any] = {"bootstrap.servers": self.broker.address(protocol),
                                "security.protocol": protocol}  # fmt: skip
        if protocol.endswith("SSL"):
            conf["ssl.ca.location"] = self.ca_file
        if protocol.startswith("SASL") and user is not None:
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": self.users.get(user, "no-such-user")})  # fmt: skip
        return {**conf, **extra}

    def settings(self, protocol: str = "SASL_PLAINTEXT", user: str = "admin",
                 mechanism: str = "SCRAM-SHA-256") -> ClientSettings:  # fmt: skip
        """sparklog's own client settings (RawClient) for ``protocol`` as ``user``."""
        sasl = protocol.startswith("SASL")
        return ClientSettings(
            self.broker.address(protocol), 10.0, "rawclient",
            security_protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=user if sasl else None,
            sasl_password=self.users.get(user, "x") if sasl else None,
            ssl_cafile=self.ca_file if protocol.endswith("SSL") else None,
        )  # fmt: skip


def write_security(
    where: Path, data_dir: str, *, users: dict[str, str] | None = None,
    settings: str = "authorizer = true\nsuper_users = [\"User:admin\"]\n",
) -> Path:  # fmt: skip
    """A CA and the broker's certificate for 127.0.0.1 (``broker.pem``, ``ca.pem``), a
    client certificate with CN=carol (``carol.pem``), ``users`` created in ``data_dir``
    with both SCRAM mechanisms, and ``broker.toml`` with a ``[security]`` table of the TLS
    files and ``settings``; its path."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(where / "broker.pem"))
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    client = ca.issue_cert("carol@example.com", common_name="carol")
    client.private_key_and_cert_chain_pem.write_to_path(str(where / "carol.pem"))
    creds = CredentialStore(Storage(data_dir))
    for user, password in (USERS if users is None else users).items():
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            creds.upsert(user, make_credential(mech, password))
    config = where / "broker.toml"
    config.write_text(
        "[security]\n"
        f'ssl_certfile = "{where / "broker.pem"}"\n'
        f'ssl_keyfile = "{where / "broker.pem"}"\n'
        f'ssl_cafile = "{where / "ca.pem"}"\n' + settings
    )
    return config


def start_secure_broker(
    tmp_path: Path, *, authorizer: bool = True, extra_security: str = "",
    listen: str = ALL_LISTENERS,
) -> SecureBroker:  # fmt: skip
    data = str(tmp_path / "data")
    settings = (f"authorizer = {'true' if authorizer else 'false'}\n"
                'super_users = ["User:admin"]\n' + extra_security)  # fmt: skip
    config = write_security(tmp_path, data, settings=settings)
    broker = BrokerProcess(data, listen=listen, extra=("--config", str(config))).start()
    return SecureBroker(broker, str(tmp_path / "ca.pem"), str(tmp_path / "carol.pem"))


def produce(conf: dict[str, Any], topic: str, n: int = 5, timeout: float = 20) -> list[Any]:
    """Produce ``n`` records; every delivery report's error (None when delivered)."""
    errors: list[Any] = []
    p = Producer({**conf, "message.timeout.ms": int(timeout * 1000) - 2000})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: errors.append(err))
    p.flush(timeout)
    return errors


def consume(conf: dict[str, Any], topic: str, group: str, n: int, timeout: float = 20) -> list[Any]:
    """Poll until ``n`` records or an error; the values, or the first error."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return [m.error()]
            got.append(m.value())
        if got:
            c.commit(asynchronous=False)
    finally:
        c.close()
    return got
