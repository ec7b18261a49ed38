"""Apache Kafka's own command-line tools (4.3.1, run from the Maven jars) against a sparklog
broker: topics, console produce and consume, consumer groups with lag and offset resets,
offsets, DeleteRecords, topic configs, and the verifiable producer and consumer (acks=all,
idempotent; a group reading every acknowledged record exactly once)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.harness import BrokerProcess

from .tools import (
    CONFIG_COMMAND,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    DELETE_RECORDS,
    GET_OFFSET_SHELL,
    GROUP_COMMAND,
    TOPIC_COMMAND,
    VERIFIABLE_CONSUMER,
    VERIFIABLE_PRODUCER,
    kafka_tool,
)

pytestmark = pytest.mark.jvm


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("kafka-tools") / "data")).start()
    yield b
    b.stop()
    b.kill()


def _bs(broker: BrokerProcess) -> tuple[str, str]:
    return ("--bootstrap-server", broker.bootstrap)


def _produce(broker: BrokerProcess, topic: str, lines: list[str]) -> None:
    kafka_tool(
        CONSOLE_PRODUCER, *_bs(broker), "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip


def test_topic_command_creates_describes_alters_lists_and_deletes(broker: BrokerProcess) -> None:
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "tools-t", "--partitions",
               "3", "--replication-factor", "1", "--config", "retention.ms=3600000")  # fmt: skip
    out = kafka_tool(TOPIC_COMMAND, *_bs(broker), "--describe", "--topic", "tools-t").stdout
    assert "PartitionCount: 3" in out and "retention.ms=3600000" in out
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--alter", "--topic", "tools-t", "--partitions", "5")
    out = kafka_tool(TOPIC_COMMAND, *_bs(broker), "--describe", "--topic", "tools-t").stdout
    assert "PartitionCount: 5" in out
    assert "tools-t" in kafka_tool(TOPIC_COMMAND, *_bs(broker), "--list").stdout.split()
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--delete", "--topic", "tools-t")
    assert "tools-t" not in kafka_tool(TOPIC_COMMAND, *_bs(broker), "--list").stdout.split()


def test_console_producer_and_consumer_round_trip_keys_and_values(broker: BrokerProcess) -> None:
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "console", "--partitions", "1")
    lines = [f"k{i}:value {i}" for i in range(50)]
    _produce(broker, "console", lines)
    out = kafka_tool(
        CONSOLE_CONSUMER, *_bs(broker), "--topic", "console", "--from-beginning",
        "--max-messages", "50", "--formatter-property", "print.key=true",
        "--formatter-property", "key.separator=:", "--timeout-ms", "30000",
    ).stdout  # fmt: skip
    assert out.split("\n")[:50] == lines


def test_group_command_describes_lag_and_resets_offsets(broker: BrokerProcess) -> None:
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "lagging", "--partitions", "2")
    _produce(broker, "lagging", [f"k{i}:v{i}" for i in range(40)])
    kafka_tool(
        CONSOLE_CONSUMER, *_bs(broker), "--topic", "lagging", "--group", "g1",
        "--from-beginning", "--max-messages", "40", "--timeout-ms", "30000",
    )  # fmt: skip
    _produce(broker, "lagging", [f"k{i}:late{i}" for i in range(10)])
    out = kafka_tool(GROUP_COMMAND, *_bs(broker), "--describe", "--group", "g1").stdout
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("g1 ")]
    assert len(rows) == 2
    header = next(ln.split() for ln in out.splitlines() if "LAG" in ln)
    lag = header.index("LAG")
    assert sum(int(r[lag]) for r in rows) == 10
    kafka_tool(GROUP_COMMAND, *_bs(broker), "--reset-offsets", "--group", "g1", "--topic",
               "lagging", "--to-earliest", "--execute")  # fmt: skip
    out = kafka_tool(GROUP_COMMAND, *_bs(broker), "--describe", "--group", "g1").stdout
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("g1 ")]
    assert sum(int(r[lag]) for r in rows) == 50
    assert "g1" in kafka_tool(GROUP_COMMAND, *_bs(broker), "--list").stdout.split()


def test_get_offset_shell_and_delete_records(broker: BrokerProcess, tmp_path: Path) -> None:
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "offs", "--partitions", "1")
    _produce(broker, "offs", [f"k:{i}" for i in range(30)])
    out = kafka_tool(GET_OFFSET_SHELL, *_bs(broker), "--topic", "offs").stdout
    assert out.split() == ["offs:0:30"]
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": "offs", "partition": 0, "offset": 12}]}
    ))  # fmt: skip
    out = kafka_tool(DELETE_RECORDS, *_bs(broker), "--offset-json-file", str(spec)).stdout
    assert "low_watermark: 12" in out
    out = kafka_tool(GET_OFFSET_SHELL, *_bs(broker), "--topic", "offs", "--time", "-2").stdout
    assert out.split() == ["offs:0:12"]


def test_config_command_alters_and_describes_topic_configs(broker: BrokerProcess) -> None:
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "cfg", "--partitions", "1")
    kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "topics", "--entity-name", "cfg",
               "--alter", "--add-config", "cleanup.policy=compact,retention.ms=5000")  # fmt: skip
    out = kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "topics", "--entity-name",
                     "cfg", "--describe").stdout  # fmt: skip
    assert "cleanup.policy=compact" in out and "retention.ms=5000" in out
    kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "topics", "--entity-name", "cfg",
               "--alter", "--delete-config", "retention.ms")  # fmt: skip
    out = kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "topics", "--entity-name",
                     "cfg", "--describe").stdout  # fmt: skip
    assert "retention.ms=5000" not in out


def _events(out: str) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def test_verifiable_producer_and_consumer_group_read_every_ack_exactly_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    n = 3000
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "verify", "--partitions", "3")
    conf = tmp_path / "producer.properties"
    conf.write_text("enable.idempotence=true\nretries=2147483647\nlinger.ms=5\n")
    out = kafka_tool(VERIFIABLE_PRODUCER, *_bs(broker), "--topic", "verify", "--max-messages",
                     str(n), "--acks", "-1", "--command-config", str(conf)).stdout  # fmt: skip
    acked = {
        (int(e["partition"]), int(e["offset"]))  # type: ignore[call-overload]
        for e in _events(out)
        if e.get("name") == "producer_send_success"
    }
    assert len(acked) == n
    out = kafka_tool(VERIFIABLE_CONSUMER, *_bs(broker), "--topic", "verify", "--group-id",
                     "verifiers", "--max-messages", str(n), "--reset-policy", "earliest",
                     timeout=180).stdout  # fmt: skip
    seen: list[tuple[int, int]] = []
    for e in _events(out):
        if e.get("name") != "records_consumed":
            continue
        for p in e["partitions"]:  # type: ignore[attr-defined]
            assert p["count"] == p["maxOffset"] - p["minOffset"] + 1
            seen += [(p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1)]
    assert len(seen) == len(set(seen)) == n
    assert set(seen) == acked
