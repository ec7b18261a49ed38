"""One module per group of Kafka APIs. Each handler takes the request context and the
parsed kio request and returns the response as plain data (``wire.build`` fits it to the
requested version), or None for "send no response" (produce with acks=0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparklog.broker.groups import GroupCoordinator
    from sparklog.broker.offsets import OffsetStore
    from sparklog.broker.partitions import PartitionManager


@dataclass
class RequestContext:
    """What a handler may use besides the request itself."""

    manager: PartitionManager
    api_version: int
    node_id: int
    host: str
    port: int
    cluster_id: str
    coordinator: GroupCoordinator | None = None
    offsets: OffsetStore | None = None
    peer_host: str = ""
