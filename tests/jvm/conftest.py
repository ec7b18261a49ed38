"""The broker Apache Kafka's own tools talk to in tests/jvm."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparklog_testkit.processes import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("kafka-tools") / "data")).start()
    yield b
    b.stop()
    b.kill()
