"""A broker joining the cluster (``sparklog.broker.membership``), as processes: a second
broker started with a node id a live broker holds waits for that registration's lease,
saying so once, then exits with the one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog_testkit.processes import BrokerProcess, EtcdCluster


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
