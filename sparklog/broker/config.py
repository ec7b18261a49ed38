"""Broker settings, from defaults, a TOML file (``conf/broker.toml``) and the command line.

TOML layout::

    [broker]
    data_dir = "data"
    listen = "127.0.0.1:9092"           # [PROTOCOL://]HOST:PORT, or a list (or a comma-
                                        # separated string) of them: one
                                        # per protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
                                        # SASL_SSL); the first is the primary
    advertised_host = "127.0.0.1"      # host clients are told to connect to
    node_id = 0
    auto_create_topics = true
    num_partitions = 1
    socket_request_max_bytes = 104857600
    max_decompressed_batch_bytes = 67108864
    max_connections = 1000
    max_inflight_requests = 8                # pipelined requests processed per connection
    group_initial_rebalance_delay_ms = 500   # an empty group waits this long for more members
    group_min_session_timeout_ms = 1000
    group_max_session_timeout_ms = 1800000
    manifest_refresh_ms = 1000               # how often open partitions look for manifest
                                             # versions committed by retention/compaction jobs
    gc_interval_ms = 30000                   # how often unreferenced segment files are deleted
    transaction_max_timeout_ms = 900000      # Kafka's transaction.max.timeout.ms
    transaction_abort_check_ms = 1000        # how often expired transactions are aborted
    etcd = "127.0.0.1:2379"                  # cluster mode (docs/cluster.md); absent: embedded
                                             # ([https://]HOST:PORT[,...])
    etcd_ca_file = "etcd-ca.pem"             # cluster mode over TLS: trust etcd's certificate
    etcd_cert_file = "broker.pem"            # ... and present this one (etcd's
    etcd_key_file = "broker.key"             # --client-cert-auth)
    etcd_user = "sparklog"                   # etcd authentication; the password from
    etcd_password_file = "etcd-password"     # this file, else $SPARKLOG_ETCD_PASSWORD
    lease_ttl_ms = 3000                      # cluster mode: the broker's etcd lease
    cluster_name = "default"                 # cluster mode: the key prefix in etcd
    rack = "r1"                              # cluster mode: for follower fetch (client.rack)
    ack_fence = true                         # cluster mode: confirm the leader epoch in etcd
                                             # before each ack; false ONLY to measure what
                                             # the fence costs (a zombie could ack writes
                                             # its successor never holds)
    schema_registry = "127.0.0.1:8081"       # serve the Schema Registry REST API there
                                             # ([http[s]://]HOST:PORT; docs/schemas.md)
    schema_registry_auth = "none"            # "basic": HTTP basic auth as a broker user
    metrics = "127.0.0.1:9404"               # serve Prometheus metrics at /metrics there
                                             # (HOST:PORT; docs/metrics.md)
    lag_sample_ms = 10000                    # lag health: how often a group is sampled,
    lag_window = 10                          # and how many samples make its window

    [topic_defaults]                   # Kafka topic configs applied to new topics
    "retention.ms" = "604800000"

    [security]                         # TLS, SASL, ACLs: sparklog.security.config
    authorizer = true
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from sparklog.kafka.address import Listener, parse_listener
from sparklog.security.config import SecurityConfig
from sparklog.storage.config import TopicConfig


@dataclass(frozen=True)
class BrokerConfig:
    data_dir: str = "data"
    listen: str | tuple[str, ...] = "127.0.0.1:9092"
    advertised_host: str | None = None
    node_id: int = 0
    auto_create_topics: bool = True
    num_partitions: int = 1
    socket_request_max_bytes: int = 100 * 1024 * 1024
    max_decompressed_batch_bytes: int = 64 * 1024 * 1024
    max_connections: int = 1000
    max_inflight_requests: int = 8
    group_initial_rebalance_delay_ms: int = 500
    group_min_session_timeout_ms: int = 1000
    group_max_session_timeout_ms: int = 1_800_000
    manifest_refresh_ms: int = 1000
    gc_interval_ms: int = 30_000
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_check_ms: int = 1000
    etcd: str | None = None
    etcd_ca_file: str | None = None
    etcd_cert_file: str | None = None
    etcd_key_file: str | None = None
    etcd_user: str | None = None
    etcd_password_file: str | None = None
    lease_ttl_ms: int = 3000
    cluster_name: str = "default"
    rack: str | None = None
    ack_fence: bool = True
    schema_registry: str | None = None
    schema_registry_auth: str = "none"
    metrics: str | None = None
    lag_sample_ms: int = 10_000
    lag_window: int = 10
    topic_defaults: dict[str, str] = field(default_factory=dict)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def __post_init__(self) -> None:
        if isinstance(self.listen, list):
            object.__setattr__(self, "listen", tuple(self.listen))
        listeners = self.listeners
        if not listeners:
            raise ValueError("listen must name at least one listener")
        protocols = [x.security_protocol for x in listeners]
        if len(set(protocols)) != len(protocols):
            raise ValueError(f"listen {list(map(str, listeners))}: one listener per security "
                             "protocol (the protocol names the listener)")  # fmt: skip
        sec = self.security
        if any(x.tls for x in listeners) and not sec.ssl_certfile:
            raise ValueError("an SSL or SASL_SSL listener needs [security] ssl_certfile and "
                             "ssl_keyfile")  # fmt: skip
        if any(x.sasl for x in listeners) and not sec.sasl_mechanisms:
            raise ValueError("a SASL listener needs [security] sasl_mechanisms")
        inter = (sec.inter_broker_listener or protocols[0]).upper()
        if self.etcd and inter.startswith("SASL_") and not sec.inter_broker_username:
            raise ValueError(
                f"cluster mode over a {inter} inter-broker listener needs [security] "
                "inter_broker_username and inter_broker_password"
            )
        if sec.inter_broker_listener and sec.inter_broker_listener.upper() not in protocols:
            raise ValueError(f"[security] inter_broker_listener {sec.inter_broker_listener} "
                             f"is not one of the listeners {protocols}")  # fmt: skip
        if self.num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {self.num_partitions}")
        if self.max_inflight_requests < 1:
            raise ValueError("max_inflight_requests must be >= 1")
        if self.manifest_refresh_ms < 10 or self.gc_interval_ms < self.manifest_refresh_ms:
            raise ValueError(
                "manifest_refresh_ms must be >= 10 and gc_interval_ms >= manifest_refresh_ms"
            )
        if self.socket_request_max_bytes < 1024:
            raise ValueError("socket_request_max_bytes must be at least 1024")
        TopicConfig.from_mapping(self.topic_defaults)
        if self.schema_registry_auth not in ("none", "basic"):
            raise ValueError(f"schema_registry_auth must be none or basic, got "
                             f"{self.schema_registry_auth!r}")  # fmt: skip
        https = self.schema_registry is not None and self.registry_address[0] == "https"
        if https and not sec.ssl_certfile:
            raise ValueError("an https schema_registry needs [security] ssl_certfile")
        if self.metrics is not None:
            self.metrics_address  # noqa: B018 (parsed: a malformed address fails here)
        if self.lag_sample_ms < 10 or self.lag_window < 2:
            raise ValueError("lag_sample_ms must be >= 10 and lag_window >= 2")
        if self.lease_ttl_ms < 1000:
            raise ValueError(f"lease_ttl_ms must be >= 1000 (etcd leases are whole seconds), "
                             f"got {self.lease_ttl_ms}")  # fmt: skip

    @property
    def clustered(self) -> bool:
        """Cluster mode: brokers over shared storage, coordinated through etcd."""
        return bool(self.etcd)

    @property
    def registry_address(self) -> tuple[str, str, int]:
        """(scheme, host, port) of ``schema_registry``."""
        raw = str(self.schema_registry or "").strip()
        scheme, sep, rest = raw.partition("://")
        if not sep:
            scheme, rest = "http", raw
        scheme = scheme.lower()
        host, _, port = rest.rstrip("/").rpartition(":")
        if scheme not in ("http", "https") or not host or not port.isdigit():
            raise ValueError(f"schema_registry {raw!r}: expected [http[s]://]HOST:PORT")
        return scheme, host.strip("[]"), int(port)

    @property
    def metrics_address(self) -> tuple[str, int]:
        """(host, port) of ``metrics``."""
        raw = str(self.metrics or "").strip().removeprefix("http://").rstrip("/")
        host, _, port = raw.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics {self.metrics!r}: expected HOST:PORT")
        return host.strip("[]"), int(port)

    @property
    def listeners(self) -> list[Listener]:
        """Every listener, the primary first."""
        specs = self.listen.split(",") if isinstance(self.listen, str) else list(self.listen)
        return [parse_listener(s) for s in specs if s.strip()]

    @property
    def listener(self) -> Listener:
        """The primary listener."""
        return self.listeners[0]

    @property
    def host_port(self) -> tuple[str, int]:
        listener = self.listener
        return listener.host, listener.port

    @classmethod
    def load(cls, path: str | None = None, **overrides: Any) -> BrokerConfig:
        values: dict[str, Any] = {}
        if path:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
            known = {f.name for f in fields(cls)}
            broker = dict(doc.get("broker", {}))
            unknown = sorted(set(broker) - known)
            if unknown:
                raise ValueError(f"{path}: unknown broker settings {unknown}")
            values.update(broker)
            if "topic_defaults" in doc:
                values["topic_defaults"] = {k: str(v) for k, v in doc["topic_defaults"].items()}
            if "security" in doc:
                values["security"] = SecurityConfig.from_mapping(dict(doc["security"]), path)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
