"""A secured broker for client tests: TLS certificates from ``trustme`` (a CA, the broker's
certificate for 127.0.0.1, a client certificate for mutual TLS), SCRAM users added offline
through the CLI, and four listeners (SASL_SSL, SASL_PLAINTEXT, SSL, PLAINTEXT) with Kafka
ACLs enforced and ``User:admin`` a super user."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparklog.kafka.client import ClientSettings
from sparklog_testkit.processes import BrokerProcess

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
LISTENERS = ("SASL_SSL", "SASL_PLAINTEXT", "SSL", "PLAINTEXT")


@dataclass
class SecuredBroker:
    process: BrokerProcess
    dir: Path

    @property
    def cafile(self) -> str:
        return str(self.dir / "ca.pem")

    def address(self, protocol: str) -> str:
        return self.process.address(protocol)

    def settings(
        self, user: str = "admin", mechanism: str = "SCRAM-SHA-256", protocol: str = "SASL_SSL",
        **kw: Any,
    ) -> ClientSettings:  # fmt: skip
        tls = {"ssl_cafile": self.cafile} if protocol in ("SSL", "SASL_SSL") else {}
        sasl = {}
        if protocol.startswith("SASL_"):
            sasl = {"sasl_mechanism": mechanism, "sasl_username": user,
                    "sasl_password": PASSWORDS.get(user, "?")}  # fmt: skip
        return ClientSettings(self.address(protocol), 10, security_protocol=protocol,
                              **{**tls, **sasl, **kw})  # fmt: skip

    def options(self, user: str, protocol: str = "SASL_SSL") -> dict[str, str]:
        """Spark Kafka source options for ``user`` (SCRAM-SHA-512, JAAS config)."""
        jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{user}" password="{PASSWORDS[user]}";')  # fmt: skip
        return {
            "kafka.bootstrap.servers": self.address(protocol),
            "kafka.security.protocol": protocol,
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.truststore.location": self.cafile,
            "kafka.ssl.truststore.type": "PEM",
        }


def add_user(data_dir: str, user: str, password: str, mechanism: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "users", "add", user, "--mechanism", mechanism,
         "--data-dir", data_dir],
        input=password + "\n", text=True, check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def start_secured_broker(where: Path) -> SecuredBroker:
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(where / "broker.key"))
    server.cert_chain_pems[0].write_to_path(str(where / "broker.pem"))
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    client = ca.issue_cert("carol.example", common_name="carol")  # mTLS: User:carol
    client.cert_chain_pems[0].write_to_path(str(where / "carol.pem"))
    client.private_key_pem.write_to_path(str(where / "carol.key"))
    data = where / "data"
    for user, password in PASSWORDS.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            add_user(str(data), user, password, mechanism)
    config = where / "broker.toml"
    config.write_text(
        "[security]\n"
        f'ssl_certfile = "{where / "broker.pem"}"\n'
        f'ssl_keyfile = "{where / "broker.key"}"\n'
        f'ssl_cafile = "{where / "ca.pem"}"\n'
        'sasl_mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]\n'
        "authorizer = true\n"
        'super_users = ["User:admin"]\n'
    )
    listen = ",".join(f"{p}://127.0.0.1:0" for p in LISTENERS)
    process = BrokerProcess(str(data), listen=listen, extra=("--config", str(config))).start()
    return SecuredBroker(process, where)
