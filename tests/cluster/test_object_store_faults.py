"""Three brokers on object storage whose S3 server fails under them: every broker reaches
SeaweedFS through a proxy the test controls (``sparklog_testkit.s3proxy``), which answers
5xx, resets connections, or stalls longer than the lease TTL, while etcd stays reachable.
An idempotent acks=all producer writes throughout; afterwards the history checker proves
every acknowledged record was read exactly once, at the offset it was acknowledged with."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog_testkit.processes import BrokerCluster, EtcdCluster
from sparklog_testkit.s3proxy import S3FaultProxy

from ..support.s3 import SeaweedS3
from .helpers import broker_logs, s3_cluster_with_topic

TOPIC = "events"
PARTITIONS = 4
TTL_MS = 2000


@pytest.fixture
def proxied(
    etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path
) -> Iterator[tuple[BrokerCluster, S3FaultProxy]]:
    with S3FaultProxy(s3_server.endpoint) as proxy:
        via = proxy.env(s3_server.env())  # every broker reaches S3 through the proxy
        with s3_cluster_with_topic(
            etcd, s3_server, tmp_path, TOPIC, PARTITIONS, lease_ttl_ms=TTL_MS,
            env=dict.fromkeys((1, 2, 3), via),
        ) as c:  # fmt: skip
            yield c, proxy


def run_with_fault(
    cluster: BrokerCluster, proxy: S3FaultProxy, fault: Callable[[], None], tmp_path: Path
) -> None:
    work = Workload(cluster.bootstrap, TOPIC, rate=300).start()
    try:
        time.sleep(2)
        fault()
        proxy.pass_through()
        t0 = time.monotonic()
        while work.acked_since(t0, 0) is None:  # the store is back: writes are acked again
            assert time.monotonic() - t0 < 60, "partition 0 never took a write again"
            time.sleep(0.1)
        time.sleep(2)
        history = work.stop()
        assert len(history.acked) > 500, (len(history.acked), work.errors[:3])
        work.read_all()
        report = check(history)
        assert report.valid, report.summary()
    finally:
        work.stop()
        broker_logs(cluster, tmp_path / "brokers.log")


def test_puts_answered_503_for_a_while_lose_nothing(
    proxied: tuple[BrokerCluster, S3FaultProxy], tmp_path: Path
) -> None:
    cluster, proxy = proxied

    def fault() -> None:
        proxy.error(503, methods=["PUT"])
        time.sleep(4)

    run_with_fault(cluster, proxy, fault, tmp_path)
    assert proxy.faulted["PUT"] > 0


def test_connections_reset_for_a_while_lose_nothing(
    proxied: tuple[BrokerCluster, S3FaultProxy], tmp_path: Path
) -> None:
    cluster, proxy = proxied

    def fault() -> None:
        proxy.reset()
        time.sleep(3)

    run_with_fault(cluster, proxy, fault, tmp_path)


def test_a_store_stalled_longer_than_the_lease_loses_nothing(
    proxied: tuple[BrokerCluster, S3FaultProxy], tmp_path: Path
) -> None:
    """The brokers keep their etcd leases (etcd is not behind the proxy) but commit
    nothing for three lease TTLs: appends wait, time out or are retried, and none is
    acknowledged until its round is committed."""
    cluster, proxy = proxied

    def fault() -> None:
        proxy.stall()
        time.sleep(3 * TTL_MS / 1000)

    run_with_fault(cluster, proxy, fault, tmp_path)
