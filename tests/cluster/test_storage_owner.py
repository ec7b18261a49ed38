"""Embedded and cluster brokers never share a storage root (``sparklog.storage.owner``):
each refuses a root another kind of writer owns, naming it. Real etcd, real brokers.

Kafka refuses the same way. Checked by hand against Apache Kafka 4.3.1 (bench/_kafka.py's
jars): two log dirs formatted by ``StorageTool format`` with different cluster ids, then
``kafka.Kafka`` with ``log.dirs`` naming both, exits 1 with ``Invalid cluster.id in:
<dir>/meta.properties. Expected <id>, but read <other id>``. sparklog's message also names
the owner's mode and etcd, since when, and what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from sparklog.storage.owner import Owner
from sparklog_testkit.processes import BrokerProcess, EtcdCluster

from .helpers import create_topic


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


def test_a_cluster_broker_stops_acknowledging_once_the_owner_record_changes(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    """The record names an embedded broker now (deleted and claimed by one of an older
    sparklog, say): the cluster broker logs why and acknowledges no more writes."""
    shared = tmp_path / "shared"
    with _cluster_broker(shared, etcd, 1) as broker:
        create_topic(broker.bootstrap, "t", 1)
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        p.produce("t", value=b"before")
        assert p.flush(60) == 0, broker.lines[-10:]
        # replaced in one step: a broker re-reading it between a delete and a create
        # would claim it again
        (shared / "other.json").write_bytes(Owner.embedded().to_json())
        os.replace(shared / "other.json", shared / "owner.json")
        line = broker.wait_for_line(
            lambda ln: " ERROR " in ln and "stops acknowledging writes" in ln, timeout=30
        )
        assert line is not None and "an embedded broker" in line, broker.lines[-5:]
        errors: list[KafkaError | None] = []
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                      "enable.idempotence": False, "message.timeout.ms": 20000})  # fmt: skip
        p.produce("t", value=b"after", on_delivery=lambda err, _m: errors.append(err))
        assert p.flush(40) == 0, broker.lines[-10:]
        assert errors[0] is not None, broker.lines[-10:]
        assert errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR, (errors, broker.lines[-10:])
