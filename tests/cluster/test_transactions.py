"""Transactions in cluster mode: a transaction spanning partitions led by several brokers
(markers reach the other leaders through WriteTxnMarkers), and the transaction coordinator
SIGKILLed mid-transaction: its successor takes ``__transaction_state`` over, and a new
producer with the same id aborts the open transaction and fences the old one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from sparklog.kafka import wire
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import cluster_with_topic, leaders

TOPIC = "txc"
PARTITIONS = 3


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, PARTITIONS) as c:
        yield c


def _producer(c: BrokerCluster, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": 60_000})  # fmt: skip
    p.init_transactions(30)
    return p


def _committed(c: BrokerCluster) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"g{time.time()}",
                         "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    last = time.monotonic()
    while time.monotonic() - last < 5:
        m = consumer.poll(0.3)
        if m is not None and not m.error():
            got.append(m.value())
            last = time.monotonic()
    consumer.close()
    return sorted(got)


def _coordinator(c: BrokerCluster, tid: str) -> int:
    deadline = time.monotonic() + 30
    while True:
        with KafkaClient(c.bootstrap) as client:
            r = client.request(wire.ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
        if int(r.error_code) == 0:
            return int(r.node_id)
        assert time.monotonic() < deadline, r
        time.sleep(0.2)


def test_a_transaction_over_partitions_of_several_leaders(cluster: BrokerCluster) -> None:
    # only partitions its coordinator does not lead: every marker goes to another broker
    tid = "spread"
    coordinator = _coordinator(cluster, tid)
    led = leaders(cluster.bootstrap, TOPIC, PARTITIONS)
    elsewhere = [p for p, n in led.items() if n != coordinator]
    assert len({led[p] for p in elsewhere}) >= 2, led  # one leader per partition: spread
    p = _producer(cluster, tid)
    p.begin_transaction()
    for i in elsewhere:
        p.produce(TOPIC, value=b"c%d" % i, partition=i)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in elsewhere:
        p.produce(TOPIC, value=b"a%d" % i, partition=i)
    p.flush()
    p.abort_transaction(30)
    assert _committed(cluster) == [b"c%d" % i for i in elsewhere]


def test_the_coordinator_fails_over_and_the_zombie_is_fenced(cluster: BrokerCluster) -> None:
    tid = "failover"
    zombie = _producer(cluster, tid)
    zombie.begin_transaction()
    for i in range(PARTITIONS):
        zombie.produce(TOPIC, value=b"open-%d" % i, partition=i)
    zombie.flush()
    coordinator = _coordinator(cluster, tid)
    cluster.brokers[coordinator].kill()
    leaders(cluster.bootstrap, TOPIC, PARTITIONS, avoid=coordinator, timeout=60)
    assert _coordinator(cluster, tid) != coordinator
    successor = _producer(cluster, tid)  # aborts the zombie's transaction, at a new epoch
    successor.begin_transaction()
    successor.produce(TOPIC, value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(Exception):  # noqa: B017 - fenced: PRODUCER_FENCED or an abortable error
        zombie.produce(TOPIC, value=b"zombie", partition=1)
        zombie.commit_transaction(30)
    assert _committed(cluster) == [b"successor"]
