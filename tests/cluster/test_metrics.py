"""``/metrics`` in cluster mode: three brokers, a real etcd. Each broker reports the
partitions it leads and the groups it coordinates, so over the cluster every series is
there exactly once; after a SIGKILL the survivors take the dead broker's series over."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerCluster, EtcdCluster
from tests.cluster.helpers import create_topic, leaders
from tests.support.metrics import Series, scrape, value

TOPIC, PARTITIONS = "metered", 6


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 3, lease_ttl_ms=2000,
                       metrics=True) as c:  # fmt: skip
        yield c


def partition_ends(scrapes: list[Series]) -> dict[int, list[float]]:
    """partition -> the current offsets reported for it, one per broker that reports it."""
    out: dict[int, list[float]] = {}
    for m in scrapes:
        for (name, labels), v in m.items():
            d = dict(labels)
            if name == "kafka_topic_partition_current_offset" and d["topic"] == TOPIC:
                out.setdefault(int(d["partition"]), []).append(v)
    return out


def test_every_partition_and_group_is_reported_once_across_the_cluster(
    cluster: BrokerCluster,
) -> None:
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for part in range(PARTITIONS):
        for _ in range(part + 1):
            p.produce(TOPIC, b"x", partition=part)
    assert p.flush(30) == 0
    with KafkaClient(cluster.bootstrap) as c:
        admin.commit_offsets(c, "counted", {(TOPIC, 2): 1})
    scrapes = [scrape(b) for b in cluster.brokers.values()]
    assert partition_ends(scrapes) == {part: [part + 1.0] for part in range(PARTITIONS)}
    lags = [value(m, "kafka_consumergroup_lag", consumergroup="counted", topic=TOPIC,
                  partition=2) for m in scrapes]  # fmt: skip
    assert sorted(lags, key=lambda v: v is not None) == [None, None, 2]  # its coordinator's
    for m in scrapes:
        assert value(m, "kafka_brokers") == 3
        assert len([k for k in m if k[0] == "kafka_broker_info"]) == 3
        assert value(m, "sparklog_lease_renewals_total") is not None
        assert value(m, "sparklog_leadership_changes_total") is not None


def test_the_survivors_report_a_killed_brokers_partitions(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
    victim = leaders(cluster.bootstrap, TOPIC, PARTITIONS)[0]
    changes = {n: value(scrape(b), "sparklog_leadership_changes_total")
               for n, b in cluster.brokers.items() if n != victim}  # fmt: skip
    cluster.brokers[victim].kill()
    survivors = [b for n, b in cluster.brokers.items() if n != victim]
    leaders(survivors[0].bootstrap, TOPIC, PARTITIONS, avoid=victim)
    deadline = time.monotonic() + 30
    while True:  # each survivor reports what it took over once it has opened it
        scrapes = [scrape(b) for b in survivors]
        ends = partition_ends(scrapes)
        if sorted(ends) == list(range(PARTITIONS)) and all(len(v) == 1 for v in ends.values()):
            break
        assert time.monotonic() < deadline, ends
        time.sleep(0.2)
    after = {n: value(scrape(b), "sparklog_leadership_changes_total")
             for n, b in cluster.brokers.items() if n != victim}  # fmt: skip
    assert sum(after.values()) > sum(changes.values())  # type: ignore[arg-type]
    assert all(value(m, "kafka_brokers") == 2 for m in scrapes)
