"""What a broker says of replicas: the replication factors CreateTopics accepts, and the
replicas and ISR that Metadata and ``/metrics`` report. Both are one function of the
storage backend (``FileSystem.redundant``), and nothing else.

sparklog keeps each partition once: its log in the storage root, written by its leader.
A broker holds no copy of its own, so Kafka's replication factor counts the copies the
*storage* keeps:

- **A single local copy** (a local disk, ``redundant`` False): the replication factor is
  1. CreateTopics accepts 1 and -1 (the broker's default, which is 1) and refuses more
  with INVALID_REPLICATION_FACTOR, saying why. Each partition reports
  ``replicas = isr = [leader]``: one copy, served by its leader. The other brokers can
  read it (they share the root), but they are not copies, and listing them would tell
  an operator the data survives the loss of a disk.
- **Redundant storage** (object stores, HDFS): the storage keeps the copies, and Kafka's
  rule applies as is: up to as many as there are live brokers, more refused with Kafka's
  message. Each partition reports the brokers the controller placed it on (its preferred
  leader first, then the leader and the next live brokers), and the live ones as the ISR:
  each reads the whole log from the storage, so it is in sync by construction.

Kafka's Java consumer follows a preferred read replica (KIP-392) only to a broker listed
among the partition's replicas, so a leader names one only from ``reported``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sparklog.errors import InvalidReplicationFactorError

#: CreateTopics' replication factor that means "the broker's default"
DEFAULT = -1


def check_replication_factor(requested: int, *, redundant: bool, live_brokers: int | None) -> int:
    """The replication factor a topic gets when ``requested`` is asked for (see the module
    docstring); ``InvalidReplicationFactorError`` if the storage cannot give it.
    ``live_brokers`` None: unknown (offline tools), only the storage's rule applies."""
    if requested == 0 or requested < DEFAULT:
        # Kafka 4.3.1's words (ReplicationControlManager)
        raise InvalidReplicationFactorError(
            "Replication factor must be larger than 0, or -1 to use the default value."
        )
    if not redundant:
        if requested not in (DEFAULT, 1):
            raise InvalidReplicationFactorError(
                f"Replication factor {requested}: the storage root is a single local copy, so "
                "every topic has replication factor 1 (use 1 or -1); sparklog brokers share "
                "the one copy rather than keep their own, and redundancy comes from the "
                "storage (object storage or HDFS)"
            )
        return 1
    if requested == DEFAULT:
        return 1
    if live_brokers is not None and requested > live_brokers:
        raise InvalidReplicationFactorError(  # Kafka 4.3.1's message
            f"Unable to replicate the partition {requested} time(s): The target replication "
            f"factor of {requested} cannot be reached because only {live_brokers} broker(s) "
            "are registered."
        )
    return requested


def reported(leader: int, placed: Sequence[int], *, redundant: bool) -> list[int]:
    """A partition's replicas as Metadata and ``/metrics`` report them: the leader alone
    on a single local copy, else the brokers it is ``placed`` on (module docstring).
    ``leader`` -1 (none assigned yet): no replica."""
    if redundant:
        return list(placed)
    return [leader] if leader >= 0 else []


def in_sync(replicas: Sequence[int], live: Collection[int]) -> list[int]:
    """The ISR: every live replica (each reads the one log in the storage, so none lags)."""
    return [r for r in replicas if r in live]
