"""What a client may do: the ``*_authorized_operations`` fields of Metadata,
DescribeCluster and DescribeGroups (KIP-430).

The field is a bit set of Kafka's ``AclOperation`` codes (bit ``1 << code``), or
``NOT_REQUESTED`` (``INT32_MIN``) when the request did not ask for it. Without an
authorizer every operation a resource type supports is allowed, so the answer is the full
set for that type (Kafka's own answer with no authorizer configured); with one, the set
of operations the principal's ACLs allow on that resource (``allowed``). The operations
each type supports are the ACL model's (``sparklog.security.acls.SUPPORTED``).
"""

from __future__ import annotations

from collections.abc import Callable

from sparklog.security.acls import SUPPORTED, ResourceType

NOT_REQUESTED = -(2**31)
_TYPES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.CLUSTER,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
}


def authorized_operations(
    resource_type: str, requested: bool = True, allowed: Callable[[int], bool] | None = None
) -> int:
    """The bit set for a resource of ``resource_type``: every operation it supports that
    ``allowed`` (the principal's ACLs; None: all) allows; or ``NOT_REQUESTED``."""
    if not requested:
        return NOT_REQUESTED
    bits = 0
    for op in SUPPORTED[_TYPES[resource_type]]:
        if allowed is None or allowed(int(op)):
            bits |= 1 << int(op)
    return bits
