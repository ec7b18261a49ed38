"""The broker's ``[security]`` settings (TOML table of ``conf/broker.toml``)::

[security]
ssl_certfile = "broker.pem"        # the listeners' certificate chain (PEM); SSL, SASL_SSL
ssl_keyfile = "broker.key"         # its private key (PEM)
ssl_cafile = "clients-ca.pem"      # CA of client certificates (mTLS; principal User:<CN>)
ssl_client_auth = "requested"      # with ssl_cafile: "requested" or "required"
sasl_mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
authorizer = false                 # enforce Kafka ACLs on every API
super_users = ["User:admin"]       # exempt from ACLs
allow_everyone_if_no_acl_found = false
connections_max_reauth_ms = 0      # > 0: SASL sessions expire (KIP-368 re-authentication)
sasl_max_receive_bytes = 524288    # largest frame before authentication (Kafka's 512 KiB)
inter_broker_listener = "SASL_SSL" # cluster mode: the listener brokers call each other on
inter_broker_username = "broker"   #   (default: the first listener), and as whom
inter_broker_password = "..."      #   (a super user, or one allowed CLUSTER_ACTION)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from sparklog.kafka.address import KAFKA_SECURITY_PROTOCOLS
from sparklog.security.acls import parse_principal
from sparklog.security.sasl import ALL_MECHANISMS

CLIENT_AUTH = ("none", "requested", "required")


@dataclass(frozen=True)
class SecurityConfig:
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "requested"
    sasl_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    authorizer: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    connections_max_reauth_ms: int = 0
    sasl_max_receive_bytes: int = 512 * 1024
    inter_broker_listener: str | None = None
    inter_broker_username: str | None = None
    inter_broker_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sasl_mechanisms", tuple(m.upper() for m in self.sasl_mechanisms))
        object.__setattr__(self, "super_users", tuple(self.super_users))
        for m in self.sasl_mechanisms:
            if m not in ALL_MECHANISMS:
                raise ValueError(
                    f"[security] sasl_mechanisms: unknown mechanism {m!r} "
                    f"(served: {', '.join(ALL_MECHANISMS)})"
                )
        for p in self.super_users:
            parse_principal(p)
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise ValueError(f"[security] ssl_client_auth must be one of {CLIENT_AUTH}")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("[security] ssl_certfile and ssl_keyfile go together")
        if self.connections_max_reauth_ms < 0:
            raise ValueError("[security] connections_max_reauth_ms must be >= 0")
        if self.sasl_max_receive_bytes < 1024:
            raise ValueError("[security] sasl_max_receive_bytes must be at least 1024")
        if (
            self.inter_broker_listener is not None
            and self.inter_broker_listener.upper() not in KAFKA_SECURITY_PROTOCOLS
        ):
            raise ValueError(
                f"[security] inter_broker_listener must be one of {KAFKA_SECURITY_PROTOCOLS}"
            )

    @classmethod
    def from_mapping(cls, values: dict[str, Any], where: str = "") -> SecurityConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{where}: unknown [security] settings {unknown}")
        args: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in values.items()
        }
        return cls(**args)
