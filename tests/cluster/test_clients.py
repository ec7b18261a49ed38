"""What clients see of a cluster beyond Metadata: KIP-320's leader-epoch checks,
OffsetForLeaderEpoch from the epoch history, DescribeCluster, and Kafka's tools."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from sparklog.kafka import admin as kc
from sparklog.kafka.client import KafkaClient
from sparklog.kafka.wire import ApiKey
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import cluster_with_topic

TOPIC = "t"


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, 1) as c:
        yield c


def leader(c: BrokerCluster, avoid: int | None = None, timeout: float = 30) -> tuple[int, int]:
    """(leader, leader epoch) of partition 0, once every live broker agrees on it and the
    leader has taken the partition over (Metadata tells the controller's assignment, which
    the leader acts on a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = set()
        for b in c.brokers.values():
            if not b.alive:
                continue
            with KafkaClient(b.bootstrap) as client:
                md = client.request(ApiKey.METADATA, 12, {
                    "topics": [{"name": TOPIC, "topic_id": None}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                })  # fmt: skip
            p = md.topics[0].partitions[0]
            seen.add((p.leader_id, p.leader_epoch))
        if len(seen) == 1:
            (found,) = seen
            if found[0] > 0 and found[0] != avoid:
                with KafkaClient(c.brokers[found[0]].bootstrap) as client:
                    if list_offsets(client, found[1]).error_code == ErrorCode.none:
                        return found
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)


def produce(c: BrokerCluster, n: int) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    for i in range(n):
        p.produce(TOPIC, b"%d" % i, on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and not errors, errors


def list_offsets(client: KafkaClient, current_epoch: int) -> Any:
    part = {"partition_index": 0, "current_leader_epoch": current_epoch, "timestamp": -1}
    resp = client.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0,
                          "topics": [{"name": TOPIC, "partitions": [part]}]})  # fmt: skip
    return resp.topics[0].partitions[0]


def end_of_epoch(client: KafkaClient, epoch: int, current: int = -1) -> Any:
    part = {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
    resp = client.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1,
                          "topics": [{"topic": TOPIC, "partitions": [part]}]})  # fmt: skip
    return resp.topics[0].partitions[0]


def test_a_client_with_a_stale_or_future_leader_epoch_is_told_so(cluster: BrokerCluster) -> None:
    node, epoch = leader(cluster)
    with KafkaClient(cluster.brokers[node].bootstrap) as client:
        assert list_offsets(client, epoch).error_code == ErrorCode.none
        assert list_offsets(client, -1).error_code == ErrorCode.none
        assert list_offsets(client, epoch + 1).error_code == ErrorCode.unknown_leader_epoch
        if epoch > 0:
            assert list_offsets(client, epoch - 1).error_code == ErrorCode.fenced_leader_epoch


def test_offset_for_leader_epoch_answers_where_each_epoch_ended(cluster: BrokerCluster) -> None:
    produce(cluster, 30)
    old, old_epoch = leader(cluster)
    cluster.brokers[old].kill()
    new, new_epoch = leader(cluster, avoid=old)
    assert new_epoch > old_epoch
    produce(cluster, 20)
    with KafkaClient(cluster.brokers[new].bootstrap) as client:
        ended = end_of_epoch(client, old_epoch)
        assert (ended.error_code, ended.leader_epoch, ended.end_offset) == (0, old_epoch, 30)
        now = end_of_epoch(client, new_epoch, new_epoch)
        assert (now.error_code, now.leader_epoch, now.end_offset) == (0, new_epoch, 50)
        assert end_of_epoch(client, new_epoch, new_epoch + 1).error_code == (
            ErrorCode.unknown_leader_epoch
        )


def test_describe_cluster_names_every_broker_and_the_controller(cluster: BrokerCluster) -> None:
    with KafkaClient(cluster.brokers[1].bootstrap) as client:
        deadline = time.monotonic() + 10
        while True:
            resp = client.request(ApiKey.DESCRIBE_CLUSTER, 1, {
                "include_cluster_authorized_operations": False, "endpoint_type": 1})  # fmt: skip
            if len(resp.brokers) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert sorted(b.broker_id for b in resp.brokers) == [1, 2, 3]
    assert resp.controller_id in (1, 2, 3)
    ports = {b.broker_id: b.port for b in resp.brokers}
    assert ports == {i: b.port for i, b in cluster.brokers.items()}


def test_topics_describe_shows_each_partitions_leader_replicas_and_isr(
    cluster: BrokerCluster,
) -> None:
    import json
    import subprocess
    import sys

    produce(cluster, 10)
    node, epoch = leader(cluster)
    other = next(i for i in cluster.brokers if i != node)  # asked of a non-leader
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "topics", "describe", TOPIC, "--json",
         "--bootstrap-server", cluster.brokers[other].bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [state] = json.loads(out.stdout)["partition_state"]
    assert (state["leader"], state["leader_epoch"], state["high_watermark"]) == (node, epoch, 10)
    assert state["replicas"] == state["isr"] == [node]  # one local copy: docs/cluster.md


def test_a_config_changed_through_another_broker_reaches_the_leader(
    cluster: BrokerCluster,
) -> None:
    from confluent_kafka import KafkaError

    node, _epoch = leader(cluster)
    other = next(i for i in cluster.brokers if i != node)
    with KafkaClient(cluster.brokers[other].bootstrap) as client:
        kc.alter_topic_configs(client, TOPIC, {"max.message.bytes": "2000"}, [])
    deadline = time.monotonic() + 60  # within a second, or more under a full suite's load
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "message.max.bytes": 100_000})
    while True:  # the leader picks the new config up within a second
        errors.clear()
        p.produce(TOPIC, b"x" * 5000, on_delivery=lambda e, _m: errors.append(e))
        p.flush(10)
        if errors and errors[0] is not None:
            break
        assert time.monotonic() < deadline, "the leader still takes 5000-byte records"
        time.sleep(0.5)
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors[0]


def holders(cluster: BrokerCluster, partition: str) -> set[int]:
    """The brokers whose log says they lead ``partition`` now (their last line about it is
    "leads", not "gave up")."""
    out = set()
    for node, b in cluster.brokers.items():
        last = [ln for ln in list(b.lines) if f"leads {partition} at" in ln
                or f"gave up {partition} " in ln]  # fmt: skip
        if last and f"leads {partition} at" in last[-1]:
            out.add(node)
    return out


def delete_through(cluster: BrokerCluster, node: int) -> None:
    """DeleteTopics sent to broker ``node`` itself (confluent-kafka's AdminClient sends it
    to the controller, whichever that is), then wait for the event, not for a time: no
    broker holds the partition any more, and one gave it up for the deletion."""
    with KafkaClient(cluster.brokers[node].bootstrap) as client:
        kc.delete_topic(client, TOPIC)
    deadline = time.monotonic() + 120  # a topic sync a second; far more under a suite's load
    while held := holders(cluster, f"{TOPIC}-0"):
        assert time.monotonic() < deadline, {n: cluster.brokers[n].lines[-30:] for n in held}
        time.sleep(0.2)
    given_up = [ln for b in cluster.brokers.values() for ln in list(b.lines)
                if f"gave up {TOPIC}-0 " in ln]  # fmt: skip
    assert any("its topic was deleted" in ln for ln in given_up), given_up


def test_a_topic_deleted_through_another_broker_is_given_up_by_its_leader(
    cluster: BrokerCluster,
) -> None:
    produce(cluster, 5)
    node, _epoch = leader(cluster)
    delete_through(cluster, next(i for i in cluster.brokers if i != node))


def test_a_topic_deleted_through_its_leader_is_given_up_as_any_other_give_up(
    cluster: BrokerCluster,
) -> None:
    """The leader closed the partition without a word (no "gave up" line, no hand-back to
    the group and transaction coordinators), which a test watching for the give-up waited
    on in vain whenever confluent-kafka's DeleteTopics reached the controller that led it."""
    produce(cluster, 5)
    node, _epoch = leader(cluster)
    delete_through(cluster, node)
