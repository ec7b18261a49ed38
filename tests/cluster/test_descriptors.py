"""A deleted topic leaves no descriptor open on a broker that served it as a follower:
follower reads (``PartitionManager.follower_view``) keep sealed segments open, and the
topic's deletion, learnt from storage, drops them."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.kafka.client import KafkaClient
from sparklog.kafka.wire import ApiKey
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import leaders


def _descriptors(pid: int) -> list[str]:
    """Where each open descriptor of ``pid`` points."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed while listing
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


def _deleted_descriptors(pid: int) -> list[str]:
    return [t for t in _descriptors(pid) if t.endswith(" (deleted)")]


def _fetch(client: KafkaClient, topic: str) -> int:
    part = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 0,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    got = client.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 100, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [part]}], "forgotten_topics_data": [],
        "rack_id": "",
    }).responses[0].partitions[0]  # fmt: skip
    return len(got.records or b"")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_followers_open_segments_close_when_the_topic_is_deleted(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 2, lease_ttl_ms=2000) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        topic = NewTopic("t", 1, 1, config={"segment.bytes": "2048"})
        admin.create_topics([topic])["t"].result(30)
        leader = leaders(c.bootstrap, "t", 1)[0]
        p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0})
        for i in range(60):
            p.produce("t", value=b"%04d" % i * 50)
            p.flush(10)
        follower = next(i for i in c.brokers if i != leader)
        with KafkaClient(c.brokers[follower].bootstrap) as client:
            assert _fetch(client, "t") > 0  # from the first, sealed segment
        pid = c.brokers[follower].pid
        prefix = os.path.realpath(tmp_path / "shared" / "topics" / "t") + os.sep
        assert any(t.startswith(prefix) for t in _descriptors(pid)), "no segment held"
        admin.delete_topics(["t"])["t"].result(30)
        deadline = time.monotonic() + 30
        while _deleted_descriptors(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _deleted_descriptors(pid) == []
