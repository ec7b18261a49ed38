"""What a client may do: the ``*_authorized_operations`` fields of Metadata,
DescribeCluster and DescribeGroups (KIP-430).

The field is a bit set of Kafka's ``AclOperation`` codes (bit ``1 << code``), or
``NOT_REQUESTED`` (``INT32_MIN``) when the request did not ask for it. Without an
authorizer every operation a resource type supports is allowed, so the answer is the full
set for that type (Kafka's own answer with no authorizer configured); with one, the set
of operations the principal's ACLs allow on that resource (``allowed``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

NOT_REQUESTED = -(2**31)


class Operation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes."""

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


Op = Operation
#: the operations each resource type supports (Kafka's ``AclEntry.supportedOperations``)
SUPPORTED = {
    "topic": (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
              Op.ALTER_CONFIGS),
    "group": (Op.READ, Op.DESCRIBE, Op.DELETE),
    "cluster": (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
    "transactional_id": (Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT),
}  # fmt: skip


def authorized_operations(
    resource_type: str, requested: bool = True, allowed: Callable[[int], bool] | None = None
) -> int:
    """The bit set for a resource of ``resource_type``: every operation it supports that
    ``allowed`` (the principal's ACLs; None: all) allows; or ``NOT_REQUESTED``."""
    if not requested:
        return NOT_REQUESTED
    bits = 0
    for op in SUPPORTED[resource_type]:
        if allowed is None or allowed(int(op)):
            bits |= 1 << int(op)
    return bits
