"""Kafka's authorization rules, decided by ``Authorizer`` from a set of bindings."""

from __future__ import annotations

import pytest

from sparklog.security.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    Authorizer,
    PatternType,
    Permission,
    ResourceType,
)

Op, RT, PT, P = AclOperation, ResourceType, PatternType, Permission


def acl(name: str, op: AclOperation, permission: Permission = P.ALLOW, *,
        principal: str = "User:alice", host: str = "*", rtype: ResourceType = RT.TOPIC,
        pattern: PatternType = PT.LITERAL) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def can(a: Authorizer, op: AclOperation, name: str, principal: str = "User:alice",
        host: str = "10.0.0.1", rtype: ResourceType = RT.TOPIC) -> bool:  # fmt: skip
    return a.authorize(principal, host, op, rtype, name)


def test_nothing_is_allowed_without_an_acl_unless_configured() -> None:
    assert not can(Authorizer(), Op.READ, "t")
    assert can(Authorizer(allow_everyone_if_no_acl_found=True), Op.READ, "t")
    # a resource that has any ACL is judged by its ACLs alone
    some = Authorizer([acl("t", Op.WRITE, principal="User:bob")],
                      allow_everyone_if_no_acl_found=True)  # fmt: skip
    assert not can(some, Op.READ, "t")


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = Authorizer([acl("orders", Op.READ), acl("pub-", Op.READ, pattern=PT.PREFIXED),
                    acl("*", Op.WRITE)])  # fmt: skip
    assert can(a, Op.READ, "orders") and not can(a, Op.READ, "orders2")
    assert can(a, Op.READ, "pub-news") and not can(a, Op.READ, "pu")
    assert can(a, Op.WRITE, "anything") and not can(a, Op.DELETE, "anything")


def test_deny_wins_over_allow_and_all_covers_every_operation() -> None:
    a = Authorizer([acl("*", Op.ALL), acl("payroll", Op.READ, P.DENY)])
    assert can(a, Op.WRITE, "payroll") and not can(a, Op.READ, "payroll")
    assert can(a, Op.READ, "other")
    everyone_denied = Authorizer([acl("*", Op.ALL), acl("x", Op.ALL, P.DENY, principal="User:*")])
    assert not can(everyone_denied, Op.DESCRIBE, "x")


def test_read_write_delete_alter_imply_describe_but_deny_implies_nothing() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert can(Authorizer([acl("t", op)]), Op.DESCRIBE, "t")
    assert can(Authorizer([acl("t", Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS, "t")
    assert not can(Authorizer([acl("t", Op.CREATE)]), Op.DESCRIBE, "t")
    denied_read = Authorizer([acl("t", Op.ALL), acl("t", Op.READ, P.DENY)])
    assert can(denied_read, Op.DESCRIBE, "t")


def test_principals_and_hosts_must_match() -> None:
    a = Authorizer([acl("t", Op.READ, host="10.0.0.1"), acl("u", Op.READ, principal="User:*")])
    assert can(a, Op.READ, "t") and not can(a, Op.READ, "t", host="10.0.0.2")
    assert not can(a, Op.READ, "t", principal="User:bob")
    assert can(a, Op.READ, "u", principal="User:anyone")


def test_super_users_may_do_anything_even_when_denied() -> None:
    a = Authorizer([acl("t", Op.ALL, P.DENY, principal="User:admin")], super_users=["User:admin"])
    assert can(a, Op.DELETE, "t", principal="User:admin")
    assert can(a, Op.CLUSTER_ACTION, "kafka-cluster", principal="User:admin", rtype=RT.CLUSTER)


def test_resource_types_are_separate() -> None:
    a = Authorizer([acl("g", Op.READ, rtype=RT.GROUP)])
    assert can(a, Op.READ, "g", rtype=RT.GROUP) and not can(a, Op.READ, "g")


def test_authorize_any_finds_some_allowed_resource_of_the_type() -> None:
    a = Authorizer([acl("pub-", Op.WRITE, pattern=PT.PREFIXED)])
    assert a.authorize_any("User:alice", "h", Op.WRITE, RT.TOPIC)
    assert not a.authorize_any("User:bob", "h", Op.WRITE, RT.TOPIC)
    denied = Authorizer([acl("x", Op.WRITE), acl("x", Op.WRITE, P.DENY)])
    assert not denied.authorize_any("User:alice", "h", Op.WRITE, RT.TOPIC)


@pytest.mark.parametrize(
    ("binding", "why"),
    [
        (acl("t", Op.CLUSTER_ACTION), "does not apply"),
        (acl("other", Op.ALTER, rtype=RT.CLUSTER), "kafka-cluster"),
        (acl("t", Op.READ, pattern=PT.MATCH), "LITERAL or PREFIXED"),
        (acl("t", Op.READ, principal="alice"), "Type:name"),
        (acl("", Op.READ), "must not be empty"),
        (acl("t", Op.READ, P.ANY), "ALLOW or DENY"),
    ],
)
def test_bindings_that_cannot_be_stored_are_refused_with_the_reason(
    binding: AclBinding, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        binding.check()


def test_filters_match_by_every_field_and_match_patterns_by_resource() -> None:
    lit, pre = acl("pub-news", Op.READ), acl("pub-", Op.WRITE, pattern=PT.PREFIXED)
    assert AclFilter().matches(lit) and AclFilter().matches(pre)
    assert AclFilter(name="pub-", pattern_type=PT.PREFIXED).matches(pre)
    assert not AclFilter(name="pub-", pattern_type=PT.LITERAL).matches(pre)
    by_resource = AclFilter(RT.TOPIC, "pub-news", PT.MATCH)
    assert by_resource.matches(lit) and by_resource.matches(pre)
    assert not AclFilter(principal="User:bob").matches(lit)
    writes = AclFilter(operation=Op.WRITE)
    assert writes.matches(pre) and not writes.matches(lit)
