"""Three brokers that share nothing but a real S3 server (SeaweedFS) and a real etcd, each
with its own cache directory: the log on object storage under real faults. An idempotent
acks=all producer writes throughout; afterwards every partition is read back and
``checker.check`` proves every acknowledged record was read exactly once, at the offset
it was acknowledged with (lost, duplicated, misplaced, reordered: all 0)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from ..support.s3 import SeaweedS3
from .helpers import broker_logs, leaders, lose_machine, s3_cluster_with_topic

TOPIC = "events"
PARTITIONS = 4
TTL_MS = 2000


@pytest.fixture
def s3_cluster(etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path) -> Iterator[BrokerCluster]:
    with s3_cluster_with_topic(
        etcd, s3_server, tmp_path, TOPIC, PARTITIONS, lease_ttl_ms=TTL_MS
    ) as c:
        yield c


def run_with_faults(cluster: BrokerCluster, fault: object, tmp_path: Path) -> None:
    work = Workload(cluster.bootstrap, TOPIC, rate=400).start()
    try:
        time.sleep(2)
        assert callable(fault)
        fault(work)
        time.sleep(3)
        history = work.stop()
        assert len(history.acked) > 1000, (len(history.acked), work.errors[:3])
        work.read_all()
        report = check(history)
        assert report.valid, report.summary()
    finally:
        work.stop()
        broker_logs(cluster, tmp_path / "brokers.log")


def test_a_leader_killed_with_its_cache_deleted_loses_nothing(
    s3_cluster: BrokerCluster, tmp_path: Path
) -> None:
    def fault(work: Workload) -> None:
        for _ in range(2):
            victim = leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS)[0]
            lose_machine(s3_cluster, victim)
            t0 = time.monotonic()
            leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS, avoid=victim)
            while work.acked_since(t0, 0) is None:
                assert time.monotonic() - t0 < 30, "partition 0 never took a write again"
                time.sleep(0.1)
            s3_cluster.brokers[victim].start()
            time.sleep(1)

    run_with_faults(s3_cluster, fault, tmp_path)


def test_a_leader_paused_past_its_lease_commits_nothing_after_its_successor(
    s3_cluster: BrokerCluster, tmp_path: Path
) -> None:
    zombie = leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS)[0]

    def fault(work: Workload) -> None:
        s3_cluster.pause(zombie)
        leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS, avoid=zombie, timeout=30)
        time.sleep(1)
        s3_cluster.resume(zombie)  # wakes believing it leads, rounds in flight
        time.sleep(2)

    run_with_faults(s3_cluster, fault, tmp_path)
