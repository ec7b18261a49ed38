"""Follower fetch (KIP-392): a broker that does not lead a partition serves a fetch from
storage up to the leader's high watermark. On one local storage root a partition's only
replica is its leader (``sparklog.broker.replicas``), so a leader asked by a client in
another rack names no other broker: Kafka's Java consumer (4.3.1,
``Cluster.nodeIfOnline``, read with javap) follows a preferred read replica only to a
broker the partition's Metadata lists, and would otherwise ask the leader again for ever."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from sparklog.kafka.client import KafkaClient
from sparklog.kafka.wire import ApiKey
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import cluster_with_topic

TOPIC = "t"
RACKS = {1: "ra", 2: "rb", 3: "rc"}


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, 1, racks=RACKS) as c:
        p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True})
        for i in range(100):
            p.produce(TOPIC, b"%d" % i)
        assert p.flush(30) == 0
        yield c


def fetch(client: KafkaClient, offset: int, rack: str) -> Any:
    part = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": offset,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    return client.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": 100, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": [part]}], "forgotten_topics_data": [],
        "rack_id": rack,
    }).responses[0].partitions[0]  # fmt: skip


def leader_of(c: BrokerCluster) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return md.topics[TOPIC].partitions[0].leader


def test_on_one_local_copy_the_leader_serves_a_client_of_another_rack_itself(
    cluster: BrokerCluster,
) -> None:
    leader = leader_of(cluster)
    other = next(i for i in RACKS if i != leader)
    with KafkaClient(cluster.brokers[leader].bootstrap) as client:
        other_rack = fetch(client, 0, RACKS[other])
        assert other_rack.preferred_read_replica == -1 and other_rack.records
        same_rack = fetch(client, 0, RACKS[leader])
        assert same_rack.preferred_read_replica == -1 and same_rack.records


def test_a_broker_that_does_not_lead_the_partition_serves_the_fetch_from_storage(
    cluster: BrokerCluster,
) -> None:
    leader = leader_of(cluster)
    other = next(i for i in RACKS if i != leader)
    with KafkaClient(cluster.brokers[other].bootstrap) as client:
        served = fetch(client, 0, RACKS[other])
        assert served.error_code == ErrorCode.none
        assert served.high_watermark == 100 and served.records
        assert fetch(client, 100, "").records == b""
        assert fetch(client, 150, "").error_code == ErrorCode.offset_not_available


def test_a_consumer_with_a_client_rack_reads_everything_through_its_rack(
    cluster: BrokerCluster,
) -> None:
    leader = leader_of(cluster)
    rack = RACKS[next(i for i in RACKS if i != leader)]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g",
                         "client.rack": rack, "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[int] = []
    deadline = time.monotonic() + 30
    while len(got) < 100 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(int(msg.value() or b"-1"))
    consumer.close()
    assert got == list(range(100))
