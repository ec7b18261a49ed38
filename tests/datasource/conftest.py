"""Fixtures of the DataSource tests: a broker with its Schema Registry, per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from sparklog_testkit.processes import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker serving the Schema Registry, for the typed-column tests of one module."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("typed") / "data"), schema_registry=True)
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.registry_url})
