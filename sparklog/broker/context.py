"""What a request handler may use besides the request itself.

``BrokerServices`` are the broker-wide parts (partitions, groups, committed offsets,
transactions, the append service) and its
identity; a ``Connection`` (``sparklog.broker.connection``) is the client the request came
on: its peer address, the listener it reached (whose address the broker advertises back to
it), the client software it named, and its principal. Every handler gets both through
one ``RequestContext``, and asks it whether the principal may do what the request asks
(``allowed``, ``require``: Kafka's ACLs, sparklog.security).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.errors import (
    AuthorizationError,
    ClusterAuthorizationError,
    GroupAuthorizationError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
    UnknownTopicError,
)
from sparklog.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from sparklog.broker.append import AppendService
    from sparklog.broker.connection import Connection
    from sparklog.broker.coordinators.group_offsets import OffsetStore
    from sparklog.broker.coordinators.groups import GroupCoordinator
    from sparklog.broker.coordinators.transactions import TransactionCoordinator
    from sparklog.broker.membership import ClusterMember
    from sparklog.broker.observability.metrics import BrokerMetrics
    from sparklog.broker.partitions import PartitionManager
    from sparklog.broker.schema_registry.service import SchemaRegistryService
    from sparklog.security.service import SecurityService
    from sparklog.storage.topics import TopicMeta

_DENIED: dict[ResourceType, type[AuthorizationError]] = {
    ResourceType.TOPIC: TopicAuthorizationError,
    ResourceType.GROUP: GroupAuthorizationError,
    ResourceType.CLUSTER: ClusterAuthorizationError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationError,
}


@dataclass(frozen=True)
class BrokerServices:
    """The broker-wide state every handler may use."""

    node_id: int
    cluster_id: str
    manager: PartitionManager
    coordinator: GroupCoordinator
    offsets: OffsetStore
    transactions: TransactionCoordinator
    appends: AppendService  # what becomes of produced records
    cluster: ClusterMember | None = None  # cluster mode only
    security: SecurityService | None = None
    registry: SchemaRegistryService | None = None  # schemas for broker-side validation
    metrics: BrokerMetrics | None = None  # /metrics: what the hot paths count


@dataclass(frozen=True)
class RequestContext:
    """One request's view of the broker and of the connection it arrived on."""

    services: BrokerServices
    connection: Connection
    api_version: int

    @property
    def principal(self) -> str:
        return self.connection.principal

    def allowed(self, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """Whether this request's principal, from its host, may ``op`` the resource."""
        security = self.services.security
        if security is None:
            return True
        return security.allowed(
            self.connection.principal, self.connection.peer_host, op, rtype, name
        )

    def allowed_any(self, op: AclOperation, rtype: ResourceType) -> bool:
        """Whether it may ``op`` some resource of ``rtype`` (KIP-679)."""
        security = self.services.security
        if security is None:
            return True
        return security.allowed_any(self.connection.principal, self.connection.peer_host, op, rtype)

    def require(self, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> None:
        """Raise Kafka's authorization error for ``rtype`` unless ``allowed``."""
        if not self.allowed(op, rtype, name):
            what = (
                "the cluster"
                if rtype == ResourceType.CLUSTER
                else (f"{rtype.name.lower().replace('_', ' ')} {name!r}")
            )
            raise _DENIED[rtype](f"{self.connection.principal} may not {op.name} {what}")

    def may_create_topic(self, name: str) -> bool:
        """CREATE on the cluster or on the topic (Kafka's rule for CreateTopics and for
        auto-creation)."""
        return self.allowed(AclOperation.CREATE, ResourceType.CLUSTER) or self.allowed(
            AclOperation.CREATE, ResourceType.TOPIC, name
        )

    def auto_create(self, name: str) -> TopicMeta:
        """The topic's metadata, auto-created only if the principal may create it (asked
        only when the topic is missing: produce calls this per partition)."""
        try:
            return self.manager.topic(name)
        except UnknownTopicError:
            if not self.may_create_topic(name):
                raise
        return self.manager.auto_create(name)

    @property
    def manager(self) -> PartitionManager:
        return self.services.manager

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.services.coordinator

    @property
    def offsets(self) -> OffsetStore:
        return self.services.offsets

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.services.transactions

    @property
    def cluster(self) -> ClusterMember | None:
        return self.services.cluster

    def coordinates(self, group: str) -> bool:
        """Whether this broker coordinates ``group`` (always, embedded)."""
        from sparklog.errors import NotCoordinatorError

        try:
            self.check_coordinator(group)
        except NotCoordinatorError:
            return False
        return True

    def check_coordinator(self, group: str) -> None:
        """Cluster mode: NotCoordinatorError unless this broker coordinates ``group`` (it
        leads the group's ``__consumer_offsets`` partition, taken over and loaded)."""
        if self.services.cluster is None:
            return
        from sparklog.broker.coordinators.group_offsets import OFFSETS_TOPIC, offsets_partition
        from sparklog.errors import NotCoordinatorError

        if (OFFSETS_TOPIC, offsets_partition(group)) not in self.services.manager.handles:
            raise NotCoordinatorError(f"broker {self.node_id} does not coordinate group {group!r}")

    @property
    def node_id(self) -> int:
        return self.services.node_id

    @property
    def cluster_id(self) -> str:
        return self.services.cluster_id

    @property
    def host(self) -> str:
        """The host this broker advertises to this client (its listener's)."""
        return self.connection.advertised_host

    @property
    def port(self) -> int:
        return self.connection.advertised_port
