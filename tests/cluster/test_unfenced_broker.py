"""The benchmark's broker with the ack fence off (``bench/_unfenced_broker.py``): the only
way to turn the fence off, since no setting or flag of sparklog does. ``bench/cluster.py``
starts its brokers through it with the harness's ``launcher``."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer

from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import create_topic

UNFENCED = (str(Path(__file__).resolve().parents[2] / "bench" / "_unfenced_broker.py"),)
OFF = "ack fence off"


def test_the_bench_launcher_starts_a_cluster_broker_with_the_fence_off(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 1, launcher=UNFENCED) as c:
        broker = c.brokers[1]
        assert any(OFF in line for line in broker.lines), broker.lines[-20:]
        create_topic(c.bootstrap, "t", 1)
        acked: list[object] = []
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        p.produce("t", b"v", on_delivery=lambda err, msg: acked.append(err))
        deadline = time.monotonic() + 60
        while not acked and time.monotonic() < deadline:
            p.poll(0.2)
        assert acked == [None]


def test_a_broker_started_as_users_start_it_keeps_the_fence(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 1) as c:
        create_topic(c.bootstrap, "t", 1)
        assert not any(OFF in line for line in c.brokers[1].lines)
