"""Kafka's ``kafka-topics`` (TopicCommand, 4.3.1) asking for a replication factor: 3 is
refused on a local storage root with the reason, 1 is accepted, as ``--replication-factor``
Kafka users type (replicas as the tool then shows them: tests/cluster/test_replicas.py)."""

from __future__ import annotations

import pytest

from sparklog_testkit.processes import BrokerProcess

from .tools import TOPIC_COMMAND, kafka_tool

pytestmark = pytest.mark.jvm


def test_topic_command_with_replication_factor_3_is_refused_with_the_reason(
    broker: BrokerProcess,
) -> None:
    out = kafka_tool(TOPIC_COMMAND, "--bootstrap-server", broker.bootstrap, "--create",
                     "--topic", "rf3", "--replication-factor", "3", check=False)  # fmt: skip
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert "InvalidReplicationFactorException" in said and "single local copy" in said, said


def test_topic_command_with_replication_factor_1_describes_it(broker: BrokerProcess) -> None:
    kafka_tool(TOPIC_COMMAND, "--bootstrap-server", broker.bootstrap, "--create", "--topic",
               "rf1", "--partitions", "2", "--replication-factor", "1")  # fmt: skip
    out = kafka_tool(TOPIC_COMMAND, "--bootstrap-server", broker.bootstrap, "--describe",
                     "--topic", "rf1").stdout  # fmt: skip
    assert "PartitionCount: 2\tReplicationFactor: 1" in out, out
