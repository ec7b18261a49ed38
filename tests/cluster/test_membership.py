"""A broker's membership of the cluster (``sparklog.broker.membership``), as processes: a
second broker started with a node id a live broker holds waits for that registration's
lease, saying so once, then exits with the one-line error; a take-over that hangs does not
keep a broker whose lease was lost from registering again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sparklog_testkit.processes import BrokerCluster, BrokerProcess, EtcdCluster

from ..support.s3 import SeaweedS3
from .helpers import broker_logs, leaders, lose_machine, s3_cluster_with_topic


def test_a_taken_node_id_is_said_once_then_the_broker_exits(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    flags = ("--node-id", "1", "--etcd", etcd.endpoints, "--lease-ttl-ms", "2000")
    first = BrokerProcess(str(tmp_path / "shared"), extra=flags).start()
    try:
        second = BrokerProcess(str(tmp_path / "shared"), extra=flags)
        with pytest.raises(RuntimeError, match="did not start"):
            second.start(timeout=60)
        assert second.proc is not None and second.proc.returncode == 1, second.lines
        waiting = [ln for ln in second.lines if "waiting" in ln and "node id 1" in ln]
        assert len(waiting) == 1, second.lines
        assert f"127.0.0.1:{first.port}" in waiting[0]
        assert second.lines[-1] == (
            f"sparklog: error: node id 1 is registered by a live broker (127.0.0.1:"
            f"{first.port}); each broker needs its own --node-id"
        ), second.lines
        assert first.alive
    finally:
        first.stop()
        first.kill()


def test_a_hung_take_over_does_not_keep_a_broker_from_registering_again(
    etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    """Broker 3's take-overs hang (each sleeps 25 s after its claim, as a GET that does not
    return would). Paused past its lease, then resumed, it still sees the lease lost and
    registers again at once, instead of after the take-overs. Those install nothing when
    they end: the successor's epoch fences them, or (had it not committed yet) the lease
    they started under is gone and they are abandoned."""
    hung = {3: {"SPARKLOG_PAUSE_AT": "take_over.after_claim=25000"}}
    with s3_cluster_with_topic(etcd, s3_server, tmp_path, "hung", 6, env=hung) as c:
        try:
            led = [p for p, n in leaders(c.bootstrap, "hung", 6).items() if n == 3]
            assert led, "broker 3 leads no partition: nothing hangs"
            c.pause(3)
            leaders(c.bootstrap, "hung", 6, avoid=3)
            c.resume(3)
            resumed = time.monotonic()
            broker = c.brokers[3]
            while not any("registered again" in ln for ln in broker.lines):
                assert time.monotonic() - resumed < 10, broker.lines[-30:]
                time.sleep(0.1)
            ended = [f"taking hung-{p} over" for p in led] + [f"of hung-{p} at" for p in led]
            while sum(any(e in ln for ln in broker.lines) for e in ended) < len(led):
                assert time.monotonic() - resumed < 45, broker.lines[-30:]
                time.sleep(0.2)
            assert not any(f"broker 3 leads hung-{p} at epoch" in ln
                           for p in led for ln in broker.lines), broker.lines  # fmt: skip
        finally:
            broker_logs(c, tmp_path / "brokers.log")


def test_a_successor_takes_the_users_partitions_over_before_the_internal_ones(
    etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    """The machine of a broker that leads user and internal partitions is gone: each
    successor installs every user partition it was given before it starts taking over an
    internal one (``__consumer_offsets``, ``__transaction_state``), which would otherwise
    share the take-over threads, the CPU and the store with them."""
    with s3_cluster_with_topic(etcd, s3_server, tmp_path, "users", 6) as c:
        try:
            led = leaders(c.bootstrap, "users", 6)
            victim = led[0]
            _until_no_take_over_for(c, 2.0)  # the internal partitions' first moves
            seen = {i: len(b.lines) for i, b in c.brokers.items()}
            lose_machine(c, victim)
            leaders(c.bootstrap, "users", 6, avoid=victim)
            time.sleep(3)  # the internal take-overs after them
            checked = 0
            for i, b in c.brokers.items():
                if i == victim:
                    continue
                lines = b.lines[seen[i] :]
                installs = [n for n, ln in enumerate(lines) if f"broker {i} leads " in ln]
                users = [n for n in installs if "leads users-" in lines[n]]
                internal = [n for n in installs if "leads __" in lines[n]]
                if users and internal:
                    checked += 1
                    assert max(users) < min(internal), lines
            assert checked, "no successor took both kinds over"
        finally:
            broker_logs(c, tmp_path / "brokers.log")


def _until_no_take_over_for(c: BrokerCluster, quiet_s: float, timeout_s: float = 30.0) -> None:
    """Wait until no broker has installed a partition for ``quiet_s`` (a cluster just
    started still moves internal partitions to the brokers that joined last)."""

    def installs() -> int:
        return sum(" leads " in ln for b in c.brokers.values() for ln in list(b.lines))

    deadline = time.monotonic() + timeout_s
    count, since = installs(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the cluster kept moving partitions"
        time.sleep(0.2)
        now = installs()
        if now != count:
            count, since = now, time.monotonic()
