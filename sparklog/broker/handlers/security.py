"""SASL authentication, ACL administration and SCRAM user administration.

SaslHandshake starts an exchange for one of the listener's mechanisms. After v1 the tokens
travel in SaslAuthenticate (v0-v2); a failed exchange is answered with
SASL_AUTHENTICATION_FAILED and the connection is closed after the answer, as in Kafka. After
v0 (KIP-152's original form, which librdkafka before 2.x and old Java clients may use) the
tokens travel raw, each framed only by its 4-byte size, and are answered the same way
(``Connection.raw_tokens``); a failed raw exchange closes the connection without an answer,
as Kafka's does. A client may authenticate again on an authenticated connection (KIP-368
re-authentication: SaslHandshake v1, then SaslAuthenticate v1+, which tells it the session
lifetime, ``connections_max_reauth_ms``), but only as the same principal; a v0 handshake
there is ILLEGAL_SASL_STATE and the connection is served on, as in Kafka.

CreateAcls/DeleteAcls need ALTER on the cluster, DescribeAcls DESCRIBE;
AlterUserScramCredentials needs ALTER on the cluster, DescribeUserScramCredentials
DESCRIBE - Kafka's rules. Without ``[security] authorizer`` the ACL APIs answer
SECURITY_DISABLED, as Kafka does without an authorizer.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.errors import (
    AuthenticationError,
    ClusterAuthorizationError,
    DuplicateCredentialError,
    IllegalSaslStateError,
    SecurityDisabledError,
    SparkLogError,
    UnacceptableCredentialError,
    UnknownCredentialError,
    UnsupportedSaslMechanismError,
)
from sparklog.security.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)
from sparklog.security.sasl import SaslExchange
from sparklog.security.scram import (
    MECHANISMS,
    check_iterations,
    from_salted_password,
    mechanism_name,
)

Op, RT = AclOperation, ResourceType
log = logging.getLogger(__name__)


def _handshake_mechanism(ctx: RequestContext, req: Any, enabled: list[str]) -> str:
    """The mechanism a SaslHandshake may start on this connection; a refusal that ends the
    exchange also closes the connection after the answer, as Kafka does."""
    conn = ctx.connection
    listener = conn.listener
    if listener is None or not listener.sasl:
        conn.close_after_response = True
        raise IllegalSaslStateError("SaslHandshake on a listener that does not take SASL")
    if ctx.api_version == 0 and conn.authenticated:
        raise IllegalSaslStateError("re-authentication needs SaslHandshake v1 (KIP-368)")
    mechanism = str(req.mechanism).upper()
    if mechanism not in enabled:
        conn.close_after_response = True
        raise UnsupportedSaslMechanismError(
            f"SASL mechanism {mechanism} is not enabled (enabled: {', '.join(enabled)})"
        )
    return mechanism


async def sasl_handshake(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    conn = ctx.connection
    enabled = list(ctx.services.security.config.sasl_mechanisms) if ctx.services.security else []
    try:
        mechanism = _handshake_mechanism(ctx, req, enabled)
    except UnsupportedSaslMechanismError as e:
        return {"error_code": error_code(e), "mechanisms": enabled}
    except IllegalSaslStateError as e:
        return {"error_code": error_code(e), "mechanisms": []}
    assert ctx.services.security is not None
    conn.sasl = SaslExchange(mechanism, ctx.services.security.credentials)
    if ctx.api_version == 0:
        conn.raw_tokens = functools.partial(_raw_token, ctx)
    return {"error_code": ErrorCode.none, "mechanisms": enabled}


def _auth_error(ctx: RequestContext, e: SparkLogError) -> dict[str, Any]:
    ctx.connection.close_after_response = True
    ctx.connection.sasl = None
    return {
        "error_code": error_code(e),
        "error_message": str(e),
        "auth_bytes": b"",
        "session_lifetime": 0,
    }


def _step(ctx: RequestContext, token: bytes, reauth_supported: bool) -> tuple[bytes, int]:
    """Feed ``token`` to the connection's exchange: (answer, session lifetime in ms, 0 for
    none). Once the client has proven who it is, the connection is authenticated as that
    principal. Raises AuthenticationError or IllegalSaslStateError."""
    conn = ctx.connection
    exchange = conn.sasl
    if exchange is None:
        raise IllegalSaslStateError("SaslAuthenticate before SaslHandshake")
    answer = exchange.step(token)
    lifetime = 0
    if exchange.complete:
        principal = str(exchange.principal)
        if conn.authenticated and conn.principal != principal:  # re-authentication
            why = f"re-authentication as {principal} on a connection of {conn.principal}"
            raise AuthenticationError(why)
        conn.principal, conn.authenticated, conn.sasl = principal, True, None
        assert ctx.services.security is not None
        reauth = ctx.services.security.config.connections_max_reauth_ms
        if reauth > 0 and reauth_supported:
            lifetime = reauth
            conn.session_expiry = time.monotonic() + reauth / 1000
    return answer, lifetime


async def sasl_authenticate(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        answer, lifetime = _step(ctx, bytes(req.auth_bytes), ctx.api_version >= 1)
    except (AuthenticationError, IllegalSaslStateError) as e:
        return _auth_error(ctx, e)
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "auth_bytes": answer,
        "session_lifetime": lifetime,
    }


async def _raw_token(ctx: RequestContext, token: bytes) -> bytes | None:
    """One raw token after SaslHandshake v0: the answer as a size-prefixed raw token. The
    raw exchange ends with it (the client's next frames are Kafka requests again); a
    failure closes the connection without an answer, as in Kafka."""
    conn = ctx.connection
    try:
        answer, _ = _step(ctx, token, reauth_supported=False)
    except (AuthenticationError, IllegalSaslStateError) as e:
        log.info("closing %s: %s", conn, e)
        conn.sasl, conn.raw_tokens, conn.close_after_response = None, None, True
        return None
    if conn.sasl is None:
        conn.raw_tokens = None
    return struct.pack(">i", len(answer)) + answer


def _security(ctx: RequestContext) -> Any:
    security = ctx.services.security
    if security is None or not security.enabled:
        raise SecurityDisabledError("no authorizer is configured ([security] authorizer)")
    return security


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        ResourceType(int(f.resource_type_filter)),
        f.resource_name_filter,
        PatternType(int(getattr(f, "pattern_type_filter", PatternType.LITERAL))),
        f.principal_filter,
        f.host_filter,
        AclOperation(int(f.operation)),
        Permission(int(f.permission_type)),
    )


def _binding_out(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(b.resource_type),
        "resource_name": b.name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


async def describe_acls(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        security = _security(ctx)
        ctx.require(Op.DESCRIBE, RT.CLUSTER)
        flt = _filter(req)
    except (SparkLogError, ValueError) as e:
        return {
            "throttle_time": 0,
            "error_code": error_code(e),
            "error_message": str(e),
            "resources": [],
        }
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for b in security.acls.bindings():
        if flt.matches(b):
            key = (int(b.resource_type), b.name, int(b.pattern_type))
            resources.setdefault(key, []).append(
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission),
                }
            )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()
        ],
    }


async def create_acls(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    results, good = [], []
    try:
        security = _security(ctx)
        ctx.require(Op.ALTER, RT.CLUSTER)
    except SparkLogError as e:
        out = {"error_code": error_code(e), "error_message": str(e)}
        return {"throttle_time": 0, "results": [out for _ in req.creations]}
    for c in req.creations:
        try:
            b = AclBinding(
                ResourceType(int(c.resource_type)),
                c.resource_name,
                PatternType(int(getattr(c, "resource_pattern_type", PatternType.LITERAL))),
                c.principal,
                c.host,
                AclOperation(int(c.operation)),
                Permission(int(c.permission_type)),
            ).check()
        except ValueError as e:
            results.append({"error_code": error_code(e), "error_message": str(e)})
            continue
        good.append(b)
        results.append({"error_code": ErrorCode.none, "error_message": None})
    if good:
        security.add_acls(good)
    return {"throttle_time": 0, "results": results}


async def delete_acls(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        security = _security(ctx)
        ctx.require(Op.ALTER, RT.CLUSTER)
        filters = [_filter(f) for f in req.filters]
    except (SparkLogError, ValueError) as e:
        out = {"error_code": error_code(e), "error_message": str(e), "matching_acls": []}
        return {"throttle_time": 0, "filter_results": [out for _ in req.filters]}
    matched = security.delete_acls(filters)
    return {
        "throttle_time": 0,
        "filter_results": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {"error_code": ErrorCode.none, "error_message": None, **_binding_out(b)}
                    for b in m
                ],
            }
            for m in matched
        ],
    }


async def describe_client_quotas(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """No quota is ever set (quotas are not served), so every filter matches nothing;
    ``kafka-configs --entity-type users --describe`` asks this before the SCRAM
    credentials. Needs DESCRIBE_CONFIGS on the cluster, as in Kafka."""
    try:
        ctx.require(Op.DESCRIBE_CONFIGS, RT.CLUSTER)
    except SparkLogError as e:
        return {
            "throttle_time": 0,
            "error_code": error_code(e),
            "error_message": str(e),
            "entries": None,
        }
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": []}


async def describe_user_scram_credentials(
    ctx: RequestContext, header: Any, req: Any
) -> dict[str, Any]:
    security = ctx.services.security
    try:
        ctx.require(Op.DESCRIBE, RT.CLUSTER)
    except SparkLogError as e:
        return {
            "throttle_time": 0,
            "error_code": error_code(e),
            "error_message": str(e),
            "results": [],
        }
    assert security is not None
    users = security.credentials.users()
    names = sorted(users) if req.users is None else [u.name for u in req.users]
    results: list[dict[str, Any]] = []
    for name in names:
        mechs = users.get(name)
        if not mechs:
            missing = UnknownCredentialError(
                f"attempt to describe a user credential that does not exist: {name}"
            )
            results.append(
                {
                    "user": name,
                    "error_code": error_code(missing),
                    "error_message": str(missing),
                    "credential_infos": [],
                }
            )
            continue
        results.append(
            {
                "user": name,
                "error_code": ErrorCode.none,
                "error_message": None,
                "credential_infos": [
                    {"mechanism": MECHANISMS[m][1], "iterations": c.iterations}
                    for m, c in sorted(mechs.items())
                ],
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": results,
    }


async def alter_user_scram_credentials(
    ctx: RequestContext, header: Any, req: Any
) -> dict[str, Any]:
    security = ctx.services.security
    assert security is not None
    users = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    errors: dict[str, SparkLogError] = {}
    try:
        ctx.require(Op.ALTER, RT.CLUSTER)
    except ClusterAuthorizationError as denied:
        return {
            "throttle_time": 0,
            "results": [
                {"user": u, "error_code": error_code(denied), "error_message": str(denied)}
                for u in dict.fromkeys(users)
            ],
        }
    seen: set[tuple[str, int]] = set()
    for name, mech in [(d.name, int(d.mechanism)) for d in req.deletions] + [
        (u.name, int(u.mechanism)) for u in req.upsertions
    ]:
        if (name, mech) in seen:
            errors[name] = DuplicateCredentialError(
                f"a user credential cannot be altered twice in the same request: {name}"
            )
        seen.add((name, mech))
        if not name:
            errors[name] = UnacceptableCredentialError("username must not be empty")
        try:
            mechanism_name(mech)
        except ValueError:
            errors[name] = UnsupportedSaslMechanismError(f"unknown SCRAM mechanism code {mech}")
    upserts: list[tuple[str, Any]] = []
    deletes: list[tuple[str, str]] = []
    for u in req.upsertions:
        if u.name in errors:
            continue
        try:
            check_iterations(int(u.iterations))
            if not u.salt or not u.salted_password:
                raise ValueError("salt and salted password must not be empty")
        except ValueError as e:
            errors[u.name] = UnacceptableCredentialError(str(e))
            continue
        upserts.append(
            (
                u.name,
                from_salted_password(
                    mechanism_name(int(u.mechanism)),
                    bytes(u.salted_password),
                    bytes(u.salt),
                    int(u.iterations),
                ),
            )
        )
    current = security.credentials.users()
    for d in req.deletions:
        if d.name in errors:
            continue
        mech_name = mechanism_name(int(d.mechanism))
        if mech_name not in current.get(d.name, {}):
            errors[d.name] = UnknownCredentialError(
                f"attempt to delete a user credential that does not exist: {d.name} {mech_name}"
            )
            continue
        deletes.append((d.name, mech_name))
    upserts = [(n, c) for n, c in upserts if n not in errors]
    deletes = [(n, m) for n, m in deletes if n not in errors]
    if upserts or deletes:
        security.credentials.alter(upserts, deletes)
    return {
        "throttle_time": 0,
        "results": [_user_result(u, errors.get(u)) for u in dict.fromkeys(users)],
    }


def _user_result(user: str, error: SparkLogError | None) -> dict[str, Any]:
    if error is None:
        return {"user": user, "error_code": ErrorCode.none, "error_message": None}
    return {"user": user, "error_code": error_code(error), "error_message": str(error)}
