"""Helpers of the cluster tests: a cluster with a topic, and its partitions' leaders."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sparklog_testkit.processes import BrokerCluster, EtcdCluster


def leaders(
    bootstrap: str, topic: str, partitions: int, avoid: int | None = None, timeout: float = 30
) -> dict[int, int]:
    """partition -> leader, once every partition of ``topic`` has a live leader other than
    ``avoid`` (as the broker that answers Metadata sees it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        except KafkaException:  # a broker that cannot reach etcd closes Metadata connections
            assert time.monotonic() < deadline
            time.sleep(0.2)
            continue
        found = {p.id: p.leader for p in md.topics[topic].partitions.values()}
        if len(found) == partitions and all(n > 0 and n != avoid for n in found.values()):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


def create_topic(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Create ``topic`` and wait for its leaders."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    return leaders(bootstrap, topic, partitions)


@contextlib.contextmanager
def cluster_with_topic(
    etcd: EtcdCluster, tmp_path: Path, topic: str, partitions: int, **kw: Any
) -> Iterator[BrokerCluster]:
    """Three brokers over ``tmp_path/shared`` (lease TTL 2 s unless given) with ``topic``."""
    kw.setdefault("lease_ttl_ms", 2000)
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 3, **kw) as c:
        create_topic(c.bootstrap, topic, partitions)
        yield c
