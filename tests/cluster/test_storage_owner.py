"""Embedded and cluster brokers never share a storage root (``sparklog.storage.owner``):
each refuses a root another kind of writer owns, naming it. Real etcd, real brokers.

Kafka refuses the same way: a broker whose log dir holds a ``meta.properties`` of another
cluster id does not start (see tests/broker/test_process.py for the check against Kafka)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.harness import BrokerProcess, EtcdCluster


def _cluster_broker(data: Path, etcd: EtcdCluster, node: int, *extra: str) -> BrokerProcess:
    return BrokerProcess(
        str(data), extra=("--node-id", str(node), "--etcd", etcd.endpoints, *extra)
    )


def test_an_embedded_broker_refuses_a_clusters_root(etcd: EtcdCluster, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    with _cluster_broker(shared, etcd, 1), pytest.raises(RuntimeError) as e:
        BrokerProcess(str(shared)).start(timeout=30)
    out = str(e.value)
    assert "belongs to cluster 'default'" in out and etcd.endpoints in out
    assert "an embedded broker (no --etcd) may not write it" in out


def test_a_cluster_broker_refuses_an_embedded_brokers_root(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    data = tmp_path / "embedded"
    with BrokerProcess(str(data)), pytest.raises(RuntimeError) as e:
        _cluster_broker(data, etcd, 1).start(timeout=30)
    assert "belongs to an embedded broker" in str(e.value)
    assert "run it without --etcd" in str(e.value)


def test_a_cluster_broker_refuses_another_clusters_root(etcd: EtcdCluster, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    with _cluster_broker(shared, etcd, 1, "--cluster", "blue"):
        with pytest.raises(RuntimeError) as e:
            _cluster_broker(shared, etcd, 2, "--cluster", "green").start(timeout=30)
        joined = _cluster_broker(shared, etcd, 3, "--cluster", "blue").start(timeout=60)
        joined.stop()
    assert "belongs to cluster 'blue'" in str(e.value)
    assert "a broker of cluster 'green' may not write it: start it with --cluster blue" in str(
        e.value
    )
