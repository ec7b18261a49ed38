"""What a request handler may use besides the request itself.

``BrokerServices`` are the broker-wide parts (partitions, groups, committed offsets) and its
identity; a ``Connection`` (``sparklog.broker.connection``) is the client the request came
on: its peer address, the listener it reached (whose address the broker advertises back to
it), the client software it named, and - once security exists - its principal. Every
handler gets both through one ``RequestContext``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparklog.broker.connection import Connection
    from sparklog.broker.groups import GroupCoordinator
    from sparklog.broker.offsets import OffsetStore
    from sparklog.broker.partitions import PartitionManager


@dataclass(frozen=True)
class BrokerServices:
    """The broker-wide state every handler may use."""

    node_id: int
    cluster_id: str
    manager: PartitionManager
    coordinator: GroupCoordinator
    offsets: OffsetStore


@dataclass(frozen=True)
class RequestContext:
    """One request's view of the broker and of the connection it arrived on."""

    services: BrokerServices
    connection: Connection
    api_version: int

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
