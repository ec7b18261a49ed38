"""Kafka's ACL model and the authorizer that applies it.

An ACL binding says: ``principal`` from ``host`` is ALLOWed or DENYed ``operation`` on the
resources a pattern names - a resource type (topic, group, cluster, transactional id) and
a name, matched LITERALly (``*`` matching every name) or as a PREFIX. The codes are
Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``), so
the wire APIs carry them unchanged.

``Authorizer.authorize`` decides as Kafka's ``StandardAuthorizer`` does:

1. a super user may do anything;
2. a DENY binding that matches the resource, principal (or ``User:*``), host (or ``*``)
   and the operation (or ALL) denies - deny wins;
3. an ALLOW binding that matches allows; ALLOW of READ, WRITE, DELETE or ALTER implies
   DESCRIBE, and ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS (DENY implies nothing);
4. otherwise: denied - unless no binding at all matches the resource and
   ``allow_everyone_if_no_acl_found`` is set.

Decisions are cached per (principal, host, operation, resource) until the bindings change.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
_IMPLIED_BY = {
    Op.DESCRIBE: (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER),
    Op.DESCRIBE_CONFIGS: (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
}
#: resource types a binding may name, and the operations each supports (Kafka's
#: ``AclEntry.supportedOperations``; ALL is valid for every type)
SUPPORTED: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.CREATE_TOKENS,
        Op.DESCRIBE_TOKENS,
    ),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
}


def parse_principal(principal: str) -> str:
    """A principal as Kafka writes it, ``Type:name`` (ValueError otherwise)."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"principal must be Type:name (e.g. User:alice), got {principal!r}")
    return principal


@dataclass(frozen=True)
class AclBinding:
    """One ACL (see the module docstring)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: Permission

    def check(self) -> AclBinding:
        """This binding, if it can be stored (ValueError naming what is wrong)."""
        if self.resource_type not in SUPPORTED:
            raise ValueError(f"resource type {self.resource_type.name} cannot carry ACLs")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(
                f"an ACL's pattern type must be LITERAL or PREFIXED, got {self.pattern_type.name}"
            )
        if not self.name:
            raise ValueError("an ACL's resource name must not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise ValueError(f"the cluster resource is named {CLUSTER_NAME!r}, got {self.name!r}")
        if self.operation != Op.ALL and self.operation not in SUPPORTED[self.resource_type]:
            raise ValueError(
                f"operation {self.operation.name} does not apply to "
                f"{self.resource_type.name} resources"
            )
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise ValueError(
                f"an ACL's permission must be ALLOW or DENY, got {self.permission.name}"
            )
        parse_principal(self.principal)
        if not self.host:
            raise ValueError("an ACL's host must not be empty (use * for any host)")
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.name,
            "name": self.name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AclBinding:
        return cls(
            ResourceType[d["resource_type"]],
            str(d["name"]),
            PatternType[d["pattern_type"]],
            str(d["principal"]),
            str(d["host"]),
            AclOperation[d["operation"]],
            Permission[d["permission"]],
        )

    def covers(self, name: str) -> bool:
        """Whether the pattern names resource ``name``."""
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)


@dataclass(frozen=True)
class AclFilter:
    """What Describe/DeleteAcls match: None and the ANY codes match everything. A MATCH
    pattern type matches every binding that applies to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not b.covers(self.name):
                return False
        else:
            if self.pattern_type not in (PatternType.ANY, b.pattern_type):
                return False
            if self.name is not None and self.name != b.name:
                return False
        return (
            self.principal in (None, b.principal)
            and self.host in (None, b.host)
            and self.operation in (AclOperation.ANY, b.operation)
            and self.permission in (Permission.ANY, b.permission)
        )


class Authorizer:
    """Decides with a fixed set of bindings (see the module docstring)."""

    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.bindings = tuple(bindings)
        self.super_users = frozenset(super_users)
        self.allow_if_none = allow_everyone_if_no_acl_found
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in self.bindings:
            self._by_type.setdefault(b.resource_type, []).append(b)
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    def authorize(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        key = (principal, host, int(op), int(rtype), name)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(principal, host, op, rtype, name)
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _decide(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        matching = [b for b in self._by_type.get(rtype, ()) if b.covers(name)]
        if not matching:
            return self.allow_if_none
        for b in matching:
            if (
                b.permission == Permission.DENY
                and b.principal in (principal, WILDCARD_PRINCIPAL)
                and b.host in (host, WILDCARD)
                and b.operation in (op, Op.ALL)
            ):
                return False
        allowed_ops = _IMPLIED_BY.get(op, (op,))
        return any(
            b.permission == Permission.ALLOW
            and b.principal in (principal, WILDCARD_PRINCIPAL)
            and b.host in (host, WILDCARD)
            and (b.operation == Op.ALL or b.operation in allowed_ops)
            for b in matching
        )

    def authorize_any(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType
    ) -> bool:
        """Whether ``op`` is allowed on some resource of ``rtype`` (Kafka's
        ``authorizeByResourceType``, KIP-679: an idempotent producer may write if it may
        WRITE any topic)."""
        if principal in self.super_users:
            return True
        return any(
            self.authorize(principal, host, op, rtype, b.name)
            for b in self._by_type.get(rtype, ())
            if b.permission == Permission.ALLOW
        )
