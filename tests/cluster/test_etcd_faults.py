"""Faults of etcd and of the way to it, under a running workload: a broker cut off from
etcd (but not from its clients) by a proxy the test cuts; an etcd minority down; the etcd
quorum lost (brokers stop acknowledging rather than diverge). Each run's history is checked
for lost, duplicated and misplaced records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.cluster.checker import check
from sparklog.cluster.workload import Workload
from sparklog.harness import BrokerProcess, EtcdCluster, TcpProxy

TOPIC = "events"
PARTITIONS = 4
TTL_MS = 2000


class Brokers:
    """Three cluster-mode brokers over one directory; each reaches etcd through
    ``endpoints[i]`` (a proxy for the one the test cuts off)."""

    def __init__(self, shared: str, endpoints: dict[int, str]) -> None:
        flags = ("--lease-ttl-ms", str(TTL_MS))
        self.brokers = {
            i: BrokerProcess(shared, extra=("--node-id", str(i), "--etcd", ep, *flags))
            for i, ep in endpoints.items()
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> Brokers:
        for b in self.brokers.values():
            b.start()
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            f.result(30)
        self.leaders()
        return self

    def leaders(self, avoid: int | None = None, timeout: float = 30) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        while True:
            md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(TOPIC, timeout=10)
            found = {p.id: p.leader for p in md.topics[TOPIC].partitions.values()}
            if len(found) == PARTITIONS and all(n > 0 and n != avoid for n in found.values()):
                return found
            assert time.monotonic() < deadline, found
            time.sleep(0.2)

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop(30)

    def log(self) -> str:
        return "\n".join(f"[{i}] {ln}" for i, b in self.brokers.items() for ln in b.lines)


def checked(work: Workload, brokers: Brokers, tmp_path: Path) -> None:
    history = work.stop()
    (tmp_path / "brokers.log").write_text(brokers.log())
    assert len(history.acked) > 500, (len(history.acked), work.errors[:3])
    work.read_all()
    report = check(history)
    assert report.valid, report.summary()


@pytest.fixture
def proxied(etcd: EtcdCluster, tmp_path: Path) -> Iterator[tuple[Brokers, dict[int, TcpProxy]]]:
    """Each broker reaches etcd through its own proxy."""
    proxies = {i: TcpProxy(etcd.endpoints.split(",")[0]) for i in (1, 2, 3)}
    brokers = Brokers(str(tmp_path / "shared"), {i: p.address for i, p in proxies.items()})
    try:
        yield brokers.start(), proxies
    finally:
        (tmp_path / "brokers.log").write_text(brokers.log())
        brokers.stop()
        for p in proxies.values():
            p.close()


def test_a_broker_cut_off_from_etcd_stops_leading_and_its_partitions_move(
    proxied: tuple[Brokers, dict[int, TcpProxy]], tmp_path: Path
) -> None:
    brokers, proxies = proxied
    leaders = brokers.leaders()
    cut = leaders[0]
    led = [p for p, n in leaders.items() if n == cut]
    work = Workload(brokers.bootstrap, TOPIC, rate=400).start()
    time.sleep(2)
    proxies[cut].cut()  # the broker still serves its clients, but cannot reach etcd
    t0 = time.monotonic()
    brokers.leaders(avoid=cut, timeout=30)
    for p in led:
        while work.acked_since(t0, p) is None:
            assert time.monotonic() - t0 < 30, f"partition {p} never took a write again"
            time.sleep(0.1)
    gone = brokers.brokers[cut].wait_for_line(lambda ln: "taken as lost" in ln, 15)
    assert gone, brokers.log()[-3000:]
    proxies[cut].restore()
    time.sleep(4)  # it registers again and takes its share back
    checked(work, brokers, tmp_path)


@pytest.fixture
def on_etcd3(etcd3: EtcdCluster, tmp_path: Path) -> Iterator[Brokers]:
    """Three brokers, each given all three etcd members."""
    brokers = Brokers(str(tmp_path / "shared"), dict.fromkeys((1, 2, 3), etcd3.endpoints))
    try:
        yield brokers.start()
    finally:
        (tmp_path / "brokers.log").write_text(brokers.log())
        brokers.stop()


def test_an_etcd_minority_down_changes_nothing_for_clients(
    etcd3: EtcdCluster, on_etcd3: Brokers, tmp_path: Path
) -> None:
    brokers = on_etcd3
    work = Workload(brokers.bootstrap, TOPIC, rate=400).start()
    time.sleep(2)
    etcd3.stop_member(0)  # the member every client talks to first
    time.sleep(2)
    victim = brokers.leaders()[0]
    brokers.brokers[victim].kill()  # and a failover still happens without it
    t0 = time.monotonic()
    brokers.leaders(avoid=victim, timeout=30)
    while work.acked_since(t0, 0) is None:
        assert time.monotonic() - t0 < 30, "partition 0 never took a write again"
        time.sleep(0.1)
    brokers.brokers[victim].start()
    etcd3.start_member(0)
    time.sleep(2)
    checked(work, brokers, tmp_path)


def test_with_the_etcd_quorum_lost_brokers_stop_acknowledging_and_resume_after(
    etcd3: EtcdCluster, on_etcd3: Brokers, tmp_path: Path
) -> None:
    brokers = on_etcd3
    work = Workload(brokers.bootstrap, TOPIC, rate=400).start()
    time.sleep(2)
    etcd3.stop_member(1)
    etcd3.stop_member(2)
    time.sleep(3)  # acks in flight when the quorum went finish (or fail)
    t_lost = time.monotonic()
    time.sleep(4)
    acked = [p for p in range(PARTITIONS) if work.acked_since(t_lost, p) is not None]
    assert acked == [], f"partitions {acked} acknowledged writes without an etcd quorum"
    etcd3.start_member(1)
    etcd3.start_member(2)
    t_back = time.monotonic()
    for p in range(PARTITIONS):
        while work.acked_since(t_back, p) is None:
            # liveness after a quorum loss is slow: every broker lost its lease and
            # registers again, a controller is elected again, and clients whose Metadata
            # connections were closed reconnect (docs/cluster.md)
            assert time.monotonic() - t_back < 90, f"partition {p} never took a write again"
            time.sleep(0.1)
    checked(work, brokers, tmp_path)
