"""Three brokers that share nothing but a real S3 server (SeaweedFS) and a real etcd, each
with its own cache directory: the log on object storage under real faults. An idempotent
acks=all producer writes throughout; afterwards every partition is read back and
``checker.check`` proves every acknowledged record was read exactly once, at the offset
it was acknowledged with (lost, duplicated, misplaced, reordered: all 0)."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from ..support.s3 import SeaweedS3
from .helpers import create_topic, leaders

TOPIC = "events"
PARTITIONS = 4
TTL_MS = 2000


@pytest.fixture
def s3_cluster(
    etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BrokerCluster]:
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)  # the brokers inherit them
    root = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    c = BrokerCluster(root, etcd.endpoints, 3, lease_ttl_ms=TTL_MS)
    for i, b in c.brokers.items():
        b.extra = (*b.extra, "--cache-dir", str(tmp_path / f"cache{i}"), "--flush-ms", "25")
    with c:
        create_topic(c.bootstrap, TOPIC, PARTITIONS)
        yield c


def cache_dir(c: BrokerCluster, i: int) -> str:
    extra = c.brokers[i].extra
    return extra[extra.index("--cache-dir") + 1]


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
        logs = "\n".join(f"[{i}] {ln}" for i, b in cluster.brokers.items() for ln in b.lines)
        (tmp_path / "brokers.log").write_text(logs)


def test_a_leader_killed_with_its_cache_deleted_loses_nothing(
    s3_cluster: BrokerCluster, tmp_path: Path
) -> None:
    def fault(work: Workload) -> None:
        for _ in range(2):
            victim = leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS)[0]
            s3_cluster.brokers[victim].kill()
            shutil.rmtree(cache_dir(s3_cluster, victim))  # the machine is gone
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
