"""``sparklog topics create --replication-factor N``, the option Kafka's ``kafka-topics``
users type, with the broker's rule (``sparklog.broker.replicas``): on a local storage root
1 or -1, more refused with the reason, offline (``--data-dir``) and through a broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerProcess

from .helpers import run


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path / "broker-data")).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


@pytest.mark.parametrize("factor", ["1", "-1"])
def test_offline_create_accepts_1_and_the_default(root: str, factor: str) -> None:
    out = run("topics", "create", "t", "--replication-factor", factor, "--data-dir", root)
    assert out.returncode == 0, out.stderr
    assert Storage(root).topics.list() == ["t"]


def test_offline_create_refuses_3_on_a_local_root_and_says_why(root: str) -> None:
    out = run("topics", "create", "t", "--replication-factor", "3", "--data-dir", root)
    assert out.returncode == 2
    assert "Replication factor 3" in out.stderr and "single local copy" in out.stderr
    assert "t" not in Storage(root).topics.list()


def test_create_through_a_broker_passes_the_factor_on(broker: BrokerProcess) -> None:
    ok = run("topics", "create", "one", "--replication-factor", "1",
             "--bootstrap-server", broker.bootstrap)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    refused = run("topics", "create", "three", "--replication-factor", "3",
                  "--bootstrap-server", broker.bootstrap)  # fmt: skip
    assert refused.returncode == 1
    assert "INVALID_REPLICATION_FACTOR" in refused.stderr
    assert "single local copy" in refused.stderr
    assert run("topics", "list", "--bootstrap-server", broker.bootstrap).stdout.split() == ["one"]
