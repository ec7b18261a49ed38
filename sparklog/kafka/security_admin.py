"""Security admin calls over sparklog's own client (``sparklog.kafka.client``): Kafka ACLs
(CreateAcls, DescribeAcls, DeleteAcls, v3), SCRAM credentials (DescribeUserScramCredentials,
AlterUserScramCredentials, v0), and the READ check the Spark source makes before it reads
segment files directly (Metadata with the topics' authorized operations).

ACLs are ``Acl`` values with Kafka's names (``TOPIC``, ``LITERAL``, ``READ``, ``ALLOW``);
Kafka's wire codes live only in the tables here. A filter is an ``Acl`` whose fields may
be ``ANY`` (``MATCH`` for the pattern type) or None (any name, principal or host).
SCRAM upserts are salted here, as Kafka's tools do: the password never leaves the client;
the broker gets the salt, the iterations and ``Hi(password, salt, iterations)``.
Refusals raise ``KafkaRequestError`` with the broker's code and message.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.errors import KafkaConnectionError, KafkaRequestError, TopicAuthorizationError
from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog.kafka.wire import ApiKey

CLUSTER_NAME = "kafka-cluster"

RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds


def _code(table: dict[str, int], kind: str, name: str) -> int:
    key = name.strip().upper().replace("-", "_")
    if key not in table:
        raise ValueError(f"unknown {kind} {name!r} (one of {', '.join(table)})")
    return table[key]


def _name(table: dict[str, int], code: int) -> str:
    for k, v in table.items():
        if v == code:
            return k
    return f"UNKNOWN({code})"


@dataclass(frozen=True)
class Acl:
    """One ACL binding (or, with ``ANY``/None fields, a filter), in Kafka's names."""

    resource_type: str
    resource_name: str | None
    pattern_type: str
    principal: str | None
    host: str | None
    operation: str
    permission: str

    def __post_init__(self) -> None:
        for table, kind, value in (
            (RESOURCE_TYPES, "resource type", self.resource_type),
            (PATTERN_TYPES, "pattern type", self.pattern_type),
            (OPERATIONS, "operation", self.operation),
            (PERMISSIONS, "permission type", self.permission),
        ):
            _code(table, kind, value)
        if self.principal is not None and ":" not in self.principal:
            raise ValueError(f"a principal is TYPE:NAME, e.g. User:alice; got {self.principal!r}")

    def _wire(self) -> dict[str, Any]:
        return {
            "resource_type": _code(RESOURCE_TYPES, "resource type", self.resource_type),
            "resource_name": self.resource_name,
            "resource_pattern_type": _code(PATTERN_TYPES, "pattern type", self.pattern_type),
            "principal": self.principal,
            "host": self.host,
            "operation": _code(OPERATIONS, "operation", self.operation),
            "permission_type": _code(PERMISSIONS, "permission type", self.permission),
        }

    def _filter(self) -> dict[str, Any]:
        w = self._wire()
        return {
            "resource_type_filter": w["resource_type"],
            "resource_name_filter": w["resource_name"],
            "pattern_type_filter": w["resource_pattern_type"],
            "principal_filter": w["principal"],
            "host_filter": w["host"],
            "operation": w["operation"],
            "permission_type": w["permission_type"],
        }

    def __str__(self) -> str:
        return (
            f"{self.resource_type}:{self.pattern_type}:{self.resource_name} "
            f"{self.permission} {self.principal} {self.operation} from host {self.host}"
        )


def _acl(rtype: int, rname: str, ptype: int, d: Any) -> Acl:
    return Acl(
        _name(RESOURCE_TYPES, rtype),
        rname,
        _name(PATTERN_TYPES, ptype),
        d.principal,
        d.host,
        _name(OPERATIONS, d.operation),
        _name(PERMISSIONS, d.permission_type),
    )


ACL_FILTER_ANY = Acl("ANY", None, "ANY", None, None, "ANY", "ANY")


def create_acls(client: KafkaClient, acls: Sequence[Acl]) -> None:
    resp = client.request(ApiKey.CREATE_ACLS, 3, {"creations": [a._wire() for a in acls]})
    for acl, r in zip(acls, resp.results, strict=False):
        if r.error_code != ErrorCode.none:
            raise KafkaRequestError(f"create ACL {acl}", r.error_code, r.error_message)


def describe_acls(client: KafkaClient, acl_filter: Acl = ACL_FILTER_ANY) -> list[Acl]:
    resp = client.request(ApiKey.DESCRIBE_ACLS, 3, acl_filter._filter())
    if resp.error_code != ErrorCode.none:
        raise KafkaRequestError("describe ACLs", resp.error_code, resp.error_message)
    return [
        _acl(r.resource_type, r.resource_name, r.pattern_type, d)
        for r in resp.resources
        for d in r.acls
    ]


def delete_acls(client: KafkaClient, filters: Sequence[Acl]) -> list[Acl]:
    """Delete every ACL matching any of ``filters``; returns those deleted."""
    resp = client.request(ApiKey.DELETE_ACLS, 3, {"filters": [f._filter() for f in filters]})
    out = []
    for f, r in zip(filters, resp.filter_results, strict=False):
        if r.error_code != ErrorCode.none:
            raise KafkaRequestError(f"delete ACLs matching {f}", r.error_code, r.error_message)
        for m in r.matching_acls:
            if m.error_code != ErrorCode.none:
                raise KafkaRequestError("delete ACL", m.error_code, m.error_message)
            out.append(_acl(m.resource_type, m.resource_name, m.pattern_type, m))
    return out


# ---------------------------------------------------------------------------- SCRAM users


def describe_user_scram_credentials(
    client: KafkaClient, users: Iterable[str] | None = None
) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations}; every user with ``users=None``."""
    names = None if users is None else [{"name": u} for u in users]
    resp = client.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": names})
    if resp.error_code != ErrorCode.none:
        raise KafkaRequestError("describe SCRAM users", resp.error_code, resp.error_message)
    out: dict[str, dict[str, int]] = {}
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            raise KafkaRequestError(f"describe user {r.user!r}", r.error_code, r.error_message)
        out[r.user] = {
            _name(SCRAM_MECHANISMS, c.mechanism): int(c.iterations) for c in r.credential_infos
        }
    return out


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's ``Hi(password, salt, iterations)`` (RFC 5802), as Kafka's ScramFormatter."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)


def _mechanism(mechanism: str) -> str:
    m = mechanism.strip().upper()
    if m not in SCRAM_MECHANISMS:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r} (one of SCRAM-SHA-256, SCRAM-SHA-512)"
        )
    return m


def upsert_user_scram_credential(
    client: KafkaClient, user: str, mechanism: str, password: str, iterations: int = 4096
) -> None:
    """Create or replace ``user``'s credential for ``mechanism`` (salted here)."""
    m = _mechanism(mechanism)
    if not user:
        raise ValueError("the user name must not be empty")
    if not password:
        raise ValueError("the password must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    salt = secrets.token_bytes(32)
    _alter(
        client,
        [],
        [
            {
                "name": user,
                "mechanism": SCRAM_MECHANISMS[m],
                "iterations": iterations,
                "salt": salt,
                "salted_password": salted_password(m, password, salt, iterations),
            }
        ],
    )


def delete_user_scram_credential(client: KafkaClient, user: str, mechanism: str) -> None:
    m = _mechanism(mechanism)
    _alter(client, [{"name": user, "mechanism": SCRAM_MECHANISMS[m]}], [])


def _alter(client: KafkaClient, deletions: list[Any], upsertions: list[Any]) -> None:
    resp = client.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": deletions, "upsertions": upsertions}
    )
    for r in resp.results:
        if r.error_code != ErrorCode.none:
            raise KafkaRequestError(f"alter user {r.user!r}", r.error_code, r.error_message)


# ---------------------------------------------------------------------------- READ check

READ_BIT = 1 << OPERATIONS["READ"]
#: the authorized-operations value of a broker that did not compute them (Kafka's default)
OPERATIONS_OMITTED = -(2**31)


def topic_authorized_operations(client: KafkaClient, topics: Sequence[str]) -> dict[str, Any]:
    """topic -> (error code, authorized-operations bit field) from Metadata v12."""
    resp = client.request(
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True,
        },
    )
    return {t.name: (t.error_code, int(t.topic_authorized_operations)) for t in resp.topics}


def check_read_access(client: KafkaClient, topics: Sequence[str]) -> None:
    """TopicAuthorizationError naming the first topic the connection's principal may not
    READ (refused with TOPIC_AUTHORIZATION_FAILED, or READ missing from its authorized
    operations). A topic the broker does not know is left to the caller's own check, and
    a broker that reports no authorized operations (no authorizer) allows everything."""
    if not topics:
        return
    found = topic_authorized_operations(client, sorted(set(topics)))
    who = client.settings.principal
    for topic in sorted(set(topics)):
        code, ops = found.get(topic, (ErrorCode.unknown_topic_or_partition, 0))
        if code == ErrorCode.topic_authorization_failed or (
            code == ErrorCode.none and ops != OPERATIONS_OMITTED and not ops & READ_BIT
        ):
            raise TopicAuthorizationError(
                f"{who} may not READ topic {topic!r} (broker {client.settings.bootstrap}): "
                "ask an administrator for an ACL, e.g. sparklog acls add --allow-principal "
                f"{who if who.startswith('User:') else 'User:NAME'} --operation READ "
                f"--topic {topic}"
            )


def require_read_access(settings: ClientSettings, topics: Sequence[str]) -> None:
    """``check_read_access`` on a new connection made with ``settings``; a broker that
    cannot be asked is an error too (a reader that reads storage directly must not skip
    the question)."""
    if not topics:
        return
    try:
        with KafkaClient(settings) as c:
            check_read_access(c, topics)
    except (KafkaConnectionError, KafkaRequestError) as e:
        raise KafkaConnectionError(
            f"cannot ask broker {settings.bootstrap} whether {settings.principal} may READ "
            f"topics {sorted(set(topics))}: {e}"
        ) from e
