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
                                             # (default 8; 2048 with the log on object
                                             # storage, where each waits for a round)
    max_inflight_bytes = 67108864            # ... and the bytes of their frames (64 MiB)
    fetch_cache_bytes = 268435456            # recent produced batches, served to fetches as
                                             # they came (sparklog.broker.wire_cache; 0: off)
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
    schema_registry = "127.0.0.1:8081"       # serve the Schema Registry REST API there
                                             # ([http[s]://]HOST:PORT; docs/schemas.md)
    schema_registry_auth = "none"            # "basic": HTTP basic auth as a broker user
    metrics = "127.0.0.1:9404"               # serve Prometheus metrics at /metrics there
                                             # (HOST:PORT; docs/metrics.md)
    cache_dir = "/var/cache/sparklog"        # a root on object storage (s3://): where this
                                             # broker keeps its active segments (default: a
                                             # directory under the system's temp dir)
    flush_ms = 100                           # object storage: a tail round every flush_ms,
    flush_bytes = 8388608                    # or sooner once this many bytes wait
    tail_timeout_ms = 10000                  # object storage: an append not committed in
                                             # this long is answered REQUEST_TIMED_OUT
    round_gc_delay_ms = 600000               # object storage: rounds nobody committed are
                                             # deleted after this long
    tail_max_chunks = 256                    # object storage: a segment rolls (and seals)
                                             # once this many rounds carried its records;
                                             # bounds a take-over's GETs and etcd's keys
    lag_sample_ms = 10000                    # lag health: how often a group is sampled,
    lag_window = 10                          # and how many samples make its window

    [topic_defaults]                   # Kafka topic configs applied to new topics
    "retention.ms" = "604800000"

    [security]                         # TLS, SASL, ACLs: sparklog.security.config
    authorizer = true

Any other table, a key outside a table, a key a table does not have or a value of the
wrong type is refused at start (``ConfigFileError``: the file, the ``[table] key``, the
value and what is allowed); the checks come from the dataclasses' fields and types.
"""

from __future__ import annotations

import difflib
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from sparklog.errors import ConfigFileError
from sparklog.kafka.address import Listener, parse_listener
from sparklog.security.config import SecurityConfig
from sparklog.storage.config import TopicConfig

#: pipelined requests a connection processes at once (``BrokerConfig.inflight_requests``)
DEFAULT_INFLIGHT = 8
OBJECT_STORAGE_INFLIGHT = 2048


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
    max_inflight_requests: int | None = None
    max_inflight_bytes: int = 64 * 1024 * 1024
    fetch_cache_bytes: int = 256 * 1024 * 1024
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
    schema_registry: str | None = None
    schema_registry_auth: str = "none"
    metrics: str | None = None
    lag_sample_ms: int = 10_000
    lag_window: int = 10
    cache_dir: str | None = None
    flush_ms: int = 100
    flush_bytes: int = 8 * 1024 * 1024
    tail_timeout_ms: int = 10_000
    round_gc_delay_ms: int = 600_000
    tail_max_chunks: int = 256
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
            raise ValueError(
                f"listen {list(map(str, listeners))}: one listener per security "
                "protocol (the protocol names the listener)"
            )
        sec = self.security
        if any(x.tls for x in listeners) and not sec.ssl_certfile:
            raise ValueError(
                "an SSL or SASL_SSL listener needs [security] ssl_certfile and ssl_keyfile"
            )
        if any(x.sasl for x in listeners) and not sec.sasl_mechanisms:
            raise ValueError("a SASL listener needs [security] sasl_mechanisms")
        inter = (sec.inter_broker_listener or protocols[0]).upper()
        if self.etcd and inter.startswith("SASL_") and not sec.inter_broker_username:
            raise ValueError(
                f"cluster mode over a {inter} inter-broker listener needs [security] "
                "inter_broker_username and inter_broker_password"
            )
        if sec.inter_broker_listener and sec.inter_broker_listener.upper() not in protocols:
            raise ValueError(
                f"[security] inter_broker_listener {sec.inter_broker_listener} "
                f"is not one of the listeners {protocols}"
            )
        if self.num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {self.num_partitions}")
        if self.max_inflight_requests is not None and self.max_inflight_requests < 1:
            raise ValueError("max_inflight_requests must be >= 1")
        if self.max_inflight_bytes < 1024:
            raise ValueError("max_inflight_bytes must be >= 1024")
        if self.fetch_cache_bytes < 0:
            raise ValueError(f"fetch_cache_bytes must be >= 0, got {self.fetch_cache_bytes}")
        if self.manifest_refresh_ms < 10 or self.gc_interval_ms < self.manifest_refresh_ms:
            raise ValueError(
                "manifest_refresh_ms must be >= 10 and gc_interval_ms >= manifest_refresh_ms"
            )
        if self.socket_request_max_bytes < 1024:
            raise ValueError("socket_request_max_bytes must be at least 1024")
        TopicConfig.from_mapping(self.topic_defaults)
        if self.schema_registry_auth not in ("none", "basic"):
            raise ValueError(
                f"schema_registry_auth must be none or basic, got {self.schema_registry_auth!r}"
            )
        https = self.schema_registry is not None and self.registry_address[0] == "https"
        if https and not sec.ssl_certfile:
            raise ValueError("an https schema_registry needs [security] ssl_certfile")
        if self.metrics is not None:
            self.metrics_address  # noqa: B018 (parsed: a malformed address fails here)
        if self.lag_sample_ms < 10 or self.lag_window < 2:
            raise ValueError("lag_sample_ms must be >= 10 and lag_window >= 2")
        if not 1 <= self.flush_ms <= 60_000 or self.flush_bytes < 1:
            raise ValueError(
                f"flush_ms must be 1..60000 and flush_bytes >= 1, got {self.flush_ms} and "
                f"{self.flush_bytes}"
            )
        if self.tail_max_chunks < 1:
            raise ValueError(f"tail_max_chunks must be >= 1, got {self.tail_max_chunks}")
        if self.tail_timeout_ms < self.flush_ms or self.round_gc_delay_ms < 60_000:
            raise ValueError(
                f"tail_timeout_ms must be >= flush_ms and round_gc_delay_ms >= 60000, got "
                f"{self.tail_timeout_ms} and {self.round_gc_delay_ms}"
            )
        if self.lease_ttl_ms < 1000:
            raise ValueError(
                f"lease_ttl_ms must be >= 1000 (etcd leases are whole seconds), "
                f"got {self.lease_ttl_ms}"
            )

    def inflight_requests(self, object_storage: bool) -> int:
        """``max_inflight_requests``, else its default: 8, or 2048 with the log on object
        storage. There a produce request waits for the next flush round, and librdkafka
        puts one partition in each request: only requests pipelined on one connection
        share a round, so a producer writing many partitions needs many in flight."""
        if self.max_inflight_requests is not None:
            return self.max_inflight_requests
        return OBJECT_STORAGE_INFLIGHT if object_storage else DEFAULT_INFLIGHT

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
        """Defaults, then the TOML file at ``path`` (checked by ``read_file``), then the
        ``overrides`` that are not None (the command line)."""
        values = read_file(path) if path else {}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


# ---------------------------------------------------------------------------- the TOML file

#: the file's tables, each checked against the fields of its dataclass; ``[broker]`` holds
#: every field of ``BrokerConfig`` except those that are tables of their own
TABLES = ("broker", "security", "topic_defaults")


def _kind(value: Any) -> str:
    """What a TOML value is, in words."""
    for t, word in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a float"),
        (str, "a string"),
        (list, "a list"),
        (dict, "a table"),
    ):
        if isinstance(value, t):
            return word
    return "a date or time"


_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_PLURAL = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}


def _expected(tp: Any) -> str:
    """What a field's type asks for, in words (None is left out: omit the key instead)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_expected(a) for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is tuple:
        return f"a list of {_PLURAL.get(typing.get_args(tp)[0], 'values')}"
    return _WORDS.get(tp, f"a {getattr(tp, '__name__', tp)}")


def _fits(value: Any, tp: Any) -> bool:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        return isinstance(value, list) and all(_fits(v, typing.get_args(tp)[0]) for v in value)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:  # TOML's true is no integer, though Python's bool is one
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(tp, type) and isinstance(value, tp)


def _shown(value: Any) -> str:
    return "{...}" if isinstance(value, dict) else json.dumps(value, default=str)


def _suggest(name: str, allowed: list[str], fmt: str = "{}") -> str:
    close = difflib.get_close_matches(name, allowed, n=1)
    return f" (did you mean {fmt.format(close[0])}?)" if close else ""


def check_table(
    path: str, table: str, cls: type, values: dict[str, Any], *, skip: tuple[str, ...] = ()
) -> None:
    """ConfigFileError unless every key of ``values`` (the TOML table ``[table]``) is a field
    of the dataclass ``cls`` (except ``skip``) and its value fits the field's type. Derived
    from the fields, so a new setting is checked as soon as it exists."""
    hints = typing.get_type_hints(cls)
    secret = {f.name for f in fields(cls) if not f.repr}
    allowed = sorted(f.name for f in fields(cls) if f.name not in skip)
    for key, value in values.items():
        if key not in allowed:
            raise ConfigFileError(
                f"{path}: [{table}] {key} is not a setting{_suggest(key, allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )
        if not _fits(value, hints[key]):
            shown = "(not shown)" if key in secret else _shown(value)
            raise ConfigFileError(
                f"{path}: [{table}] {key} = {shown} is {_kind(value)}; expected "
                f"{_expected(hints[key])}"
            )


def read_file(path: str) -> dict[str, Any]:
    """``BrokerConfig`` arguments from the TOML file at ``path``: ConfigFileError names the
    file, the table and key, and what is allowed, for an unknown table or key or a value of
    the wrong type (a misspelled ``[securty]`` must not silently turn the authorizer off)."""
    with open(path, "rb") as f:
        try:
            doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigFileError(f"{path}: not valid TOML: {e}") from None
    tables = ", ".join(f"[{t}]" for t in TABLES)
    broker_keys = [f.name for f in fields(BrokerConfig) if f.name not in TABLES]
    for name, value in doc.items():
        if name in TABLES and not isinstance(value, dict):
            raise ConfigFileError(f"{path}: [{name}] must be a table (got {_kind(value)})")
        if name in TABLES:
            continue
        if not isinstance(value, dict):
            home = f" ({name} is a [broker] setting: move it under [broker])"
            raise ConfigFileError(
                f"{path}: {name} = {_shown(value)} is outside any table"
                f"{home if name in broker_keys else ''}; the file holds the tables {tables}"
            )
        raise ConfigFileError(
            f"{path}: unknown table [{name}]{_suggest(name, list(TABLES), '[{}]')}; "
            f"allowed tables: {tables}"
        )
    values: dict[str, Any] = dict(doc.get("broker", {}))
    check_table(path, "broker", BrokerConfig, values, skip=TABLES)
    if "topic_defaults" in doc:
        defaults = doc["topic_defaults"]
        for key, value in defaults.items():  # the names are Kafka's, checked by TopicConfig
            if not isinstance(value, str | int | float):
                raise ConfigFileError(
                    f'{path}: [topic_defaults] "{key}" = {_shown(value)} is {_kind(value)}; '
                    "expected a string or a number"
                )
        values["topic_defaults"] = {
            k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in defaults.items()
        }
    if "security" in doc:
        check_table(path, "security", SecurityConfig, doc["security"])
        values["security"] = SecurityConfig.from_mapping(dict(doc["security"]), path)
    return values
