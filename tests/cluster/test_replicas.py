"""Replicas and ISR of a three-broker cluster over one local storage root: the data is one
copy, so every partition reports its leader as its only replica and in-sync replica
(Metadata from every broker, and ``/metrics``), and CreateTopics refuses a replication
factor of 3 although three brokers are live (``sparklog.broker.replicas``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog_testkit.processes import BrokerCluster, EtcdCluster
from tests.support.metrics import scrape, value

from .helpers import cluster_with_topic, leaders

TOPIC, PARTITIONS = "copies", 3


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, PARTITIONS, metrics=True) as c:
        yield c


def test_metadata_from_every_broker_lists_the_leader_as_the_only_replica_and_isr(
    cluster: BrokerCluster,
) -> None:
    for node, b in cluster.brokers.items():
        leaders(b.bootstrap, TOPIC, PARTITIONS)  # this broker's view knows every leader
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(TOPIC, timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        for p in md.topics[TOPIC].partitions.values():
            assert p.replicas == p.isrs == [p.leader], (node, p)


def test_replication_factor_3_is_refused_although_three_brokers_are_live(
    cluster: BrokerCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert len(admin.list_topics(timeout=10).brokers) == 3
    with pytest.raises(Exception) as e:
        admin.create_topics([NewTopic("three", 1, 3)])["three"].result(30)
    err = e.value.args[0]
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "single local copy" in err.str()


def test_the_leader_reports_one_replica_and_one_in_sync_replica(cluster: BrokerCluster) -> None:
    led = leaders(cluster.bootstrap, TOPIC, PARTITIONS)
    deadline = time.monotonic() + 30
    while True:  # a leader reports a partition once it has taken it over
        found = {}
        for node, b in cluster.brokers.items():
            m = scrape(b)
            for p, leader in led.items():
                if leader == node:
                    found[p] = (
                        value(m, "kafka_topic_partition_replicas", topic=TOPIC, partition=p),
                        value(m, "kafka_topic_partition_in_sync_replica", topic=TOPIC, partition=p),
                    )
        if all(v[0] is not None for v in found.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found == {p: (1, 1) for p in range(PARTITIONS)}


@pytest.mark.jvm
def test_kafkas_topic_command_describes_replication_factor_1_and_the_leader_alone(
    cluster: BrokerCluster,
) -> None:
    """Kafka's own ``kafka-topics --describe`` (TopicCommand, 4.3.1): on a Kafka broker a
    topic created with replication factor 1 reads ``ReplicationFactor: 1`` and, per
    partition, ``Replicas: 1\\tIsr: 1``; here the same, with the partition's leader."""
    from tests.jvm.tools import TOPIC_COMMAND, kafka_tool

    led = leaders(cluster.bootstrap, TOPIC, PARTITIONS)
    out = kafka_tool(TOPIC_COMMAND, "--bootstrap-server", cluster.bootstrap, "--describe",
                     "--topic", TOPIC).stdout  # fmt: skip
    assert f"PartitionCount: {PARTITIONS}\tReplicationFactor: 1" in out, out
    for p, leader in led.items():
        assert f"Partition: {p}\tLeader: {leader}\tReplicas: {leader}\tIsr: {leader}" in out, out
