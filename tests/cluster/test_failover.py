"""Three brokers in cluster mode over one shared directory, on a real etcd, with real
faults: SIGKILL of leaders, a leader paused past its lease (the zombie), the controller
killed. An idempotent acks=all producer (confluent-kafka) writes throughout; afterwards
every partition is read from start to end and ``checker.check`` proves every acknowledged
record was read exactly once, at the offset it was acknowledged with."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog.errors import KafkaRequestError
from sparklog.kafka.admin import list_offsets
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import cluster_with_topic, leaders

TOPIC = "events"
PARTITIONS = 4
TTL_MS = 2000


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, PARTITIONS, lease_ttl_ms=TTL_MS) as c:
        yield c


def wait_for_leaders(
    c: BrokerCluster, timeout: float = 20, avoid: int | None = None
) -> dict[int, int]:
    return leaders(c.bootstrap, TOPIC, PARTITIONS, avoid, timeout)


def test_metadata_from_any_broker_lists_every_broker_and_every_leader(
    cluster: BrokerCluster,
) -> None:
    for b in cluster.brokers.values():
        deadline = time.monotonic() + 10
        while True:  # each broker's view of etcd is refreshed every 250 ms
            md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(TOPIC, timeout=10)
            parts = md.topics[TOPIC].partitions.values()
            if all(p.leader > 0 for p in parts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted(md.brokers) == [1, 2, 3]
        assert md.controller_id in (1, 2, 3)
        assert {p.leader for p in parts} <= {1, 2, 3}
        assert all(p.leader in p.replicas and sorted(p.isrs) == sorted(p.replicas) for p in parts)


def test_a_broker_that_does_not_lead_a_partition_answers_not_leader_or_follower(
    cluster: BrokerCluster,
) -> None:
    leader = wait_for_leaders(cluster)[0]
    other = next(i for i in cluster.brokers if i != leader)
    with KafkaClient(cluster.brokers[other].bootstrap) as client:
        with pytest.raises(KafkaRequestError) as e:
            list_offsets(client, TOPIC, [0], -1)
        assert e.value.code == ErrorCode.not_leader_or_follower
    deadline = time.monotonic() + 15
    while True:  # the leader answers, once it has taken the partition over (it may move
        leader = wait_for_leaders(cluster)[0]  # while late brokers join: ask the new one)
        try:
            with KafkaClient(cluster.brokers[leader].bootstrap) as client:
                assert list_offsets(client, TOPIC, [0], -1)[0][0] >= 0
            return
        except KafkaRequestError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_with_faults(cluster: BrokerCluster, fault: object) -> None:
    """Run the workload through ``fault(work)`` and check its history. Every broker's log
    is left in ``brokers.log`` beside the shared directory (pytest keeps it)."""
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
        (Path(cluster.data_dir).parent / "brokers.log").write_text(logs)


def test_leaders_killed_again_and_again_lose_no_acknowledged_write(
    cluster: BrokerCluster,
) -> None:
    def fault(work: Workload) -> None:
        for _ in range(2):
            victim = wait_for_leaders(cluster)[0]
            cluster.brokers[victim].kill()
            t0 = time.monotonic()
            wait_for_leaders(cluster, avoid=victim)
            while work.acked_since(t0, 0) is None:
                assert time.monotonic() - t0 < 30, "partition 0 never took a write again"
                time.sleep(0.1)
            cluster.brokers[victim].start()
            time.sleep(1)

    run_with_faults(cluster, fault)


def test_a_leader_paused_past_its_lease_acknowledges_nothing_its_successor_does_not_hold(
    cluster: BrokerCluster,
) -> None:
    zombie = wait_for_leaders(cluster)[0]

    def fault(work: Workload) -> None:
        cluster.pause(zombie)
        wait_for_leaders(cluster, avoid=zombie, timeout=30)
        time.sleep(1)
        cluster.resume(zombie)  # it wakes believing it leads, with produce requests in flight
        time.sleep(2)

    run_with_faults(cluster, fault)
    log = "\n".join(cluster.brokers[zombie].lines)
    assert "gave up" in log, log[-3000:]


def test_the_controller_killed_is_replaced_and_partitions_keep_their_leaders(
    cluster: BrokerCluster,
) -> None:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    controller = md.controller_id

    def fault(work: Workload) -> None:
        cluster.brokers[controller].kill()
        wait_for_leaders(cluster, avoid=controller, timeout=30)
        deadline = time.monotonic() + 30
        while True:
            now = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
            if now.controller_id not in (-1, controller):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)

    run_with_faults(cluster, fault)


def test_committed_offsets_survive_their_coordinators_death(cluster: BrokerCluster) -> None:
    work = Workload(cluster.bootstrap, TOPIC, rate=400).start()
    time.sleep(1)
    work.stop()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g1",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    wanted = [TopicPartition(TOPIC, p, 3 + p) for p in range(PARTITIONS)]
    consumer.commit(offsets=wanted, asynchronous=False)
    consumer.close()
    from sparklog.broker.coordinators.group_offsets import offsets_partition

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
        "__consumer_offsets", timeout=10
    )
    coordinator = md.topics["__consumer_offsets"].partitions[offsets_partition("g1")].leader
    cluster.brokers[coordinator].kill()
    again = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g1"})
    deadline = time.monotonic() + 30
    while True:
        try:
            got = again.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
            if all(t.error is None for t in got):
                break
        except Exception:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.5)
    again.close()
    assert [t.offset for t in got] == [3 + p for p in range(PARTITIONS)]


def test_a_leader_stopped_gracefully_hands_its_partitions_over_at_once(
    cluster: BrokerCluster,
) -> None:
    def fault(work: Workload) -> None:
        victim = wait_for_leaders(cluster)[0]
        t0, wall0 = time.monotonic(), datetime.datetime.now()
        assert cluster.brokers[victim].stop(30) == 0
        while work.acked_since(t0, 0) is None:
            assert time.monotonic() - t0 < 20, "partition 0 never took a write again"
            time.sleep(0.05)
        # another broker took partition 0 over well within the lease TTL: the stopping
        # broker left etcd instead of letting its lease expire
        took: list[datetime.datetime] = []
        deadline = time.monotonic() + 10
        while not took and time.monotonic() < deadline:
            time.sleep(0.1)
            took = [
                datetime.datetime.strptime(ln[:23], "%Y-%m-%d %H:%M:%S,%f")
                for i, b in cluster.brokers.items() if i != victim
                for ln in list(b.lines) if f"leads {TOPIC}-0 at epoch" in ln
            ]  # fmt: skip
        assert took and (max(took) - wall0).total_seconds() < TTL_MS / 1000, (took, wall0)
        cluster.brokers[victim].start()

    run_with_faults(cluster, fault)


def test_the_controller_paused_past_its_lease_is_replaced_and_writes_nothing_after(
    cluster: BrokerCluster,
) -> None:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    controller = md.controller_id

    def fault(work: Workload) -> None:
        cluster.pause(controller)
        deadline = time.monotonic() + 30
        while True:  # another broker is elected while the old controller sleeps
            now = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
            if now.controller_id not in (-1, controller):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        wait_for_leaders(cluster, avoid=controller, timeout=30)
        cluster.resume(controller)  # it wakes believing it is controller
        time.sleep(2)

    run_with_faults(cluster, fault)
    log = "\n".join(cluster.brokers[controller].lines)
    assert "deposed" in log or "expired" in log or "taken as lost" in log, log[-3000:]
