"""Apache Kafka's own command-line tools (4.3.1, run from the Maven jars) against a sparklog
broker: topics, console produce and consume, consumer groups with lag and offset resets,
offsets, DeleteRecords, topic configs, and the verifiable producer and consumer (acks=all,
idempotent; a group reading every acknowledged record exactly once)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparklog.jars import kafka_classpath
from sparklog_testkit.processes import BrokerProcess

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


def test_config_command_sets_cluster_wide_topic_defaults(broker: BrokerProcess) -> None:
    """``--entity-type brokers --entity-default``: the dynamic default of a topic config,
    followed at once by every topic without its own value, as in Kafka."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "inherits")
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "owns", "--config",
               "retention.ms=1000")  # fmt: skip
    kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "brokers", "--entity-default",
               "--alter", "--add-config", "log.retention.ms=7200000")  # fmt: skip
    out = kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "brokers",
                     "--entity-default", "--describe").stdout  # fmt: skip
    assert "log.retention.ms=7200000" in out
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def retention(topic: str) -> tuple[str, str]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entry = admin.describe_configs([res])[res].result(30)["retention.ms"]
        return entry.value, ConfigSource(entry.source).name

    assert retention("inherits") == ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert retention("owns") == ("1000", "DYNAMIC_TOPIC_CONFIG")
    kafka_tool(CONFIG_COMMAND, *_bs(broker), "--entity-type", "brokers", "--entity-default",
               "--alter", "--delete-config", "log.retention.ms")  # fmt: skip
    assert retention("inherits") == ("604800000", "DEFAULT_CONFIG")


def _events(out: str) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def test_verifiable_producer_and_consumer_group_read_every_ack_exactly_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    n = 3000
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "verify", "--partitions", "3")
    acked = _verifiable_produce(broker, tmp_path, "verify", n, **{
        "enable.idempotence": "true", "retries": "2147483647", "linger.ms": "5",
    })  # fmt: skip
    out = kafka_tool(VERIFIABLE_CONSUMER, *_bs(broker), "--topic", "verify", "--group-id",
                     "verifiers", "--max-messages", str(n), "--reset-policy", "earliest",
                     timeout=180).stdout  # fmt: skip
    seen = _consumed(_events(out))
    assert len(seen) == len(set(seen)) == n
    assert set(seen) == acked


def _verifiable_produce(
    broker: BrokerProcess, tmp_path: Path, topic: str, n: int, **configs: str
) -> set[tuple[int, int]]:
    conf = tmp_path / f"{topic}-producer.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in configs.items()))
    out = kafka_tool(VERIFIABLE_PRODUCER, *_bs(broker), "--topic", topic, "--max-messages",
                     str(n), "--acks", "-1", "--command-config", str(conf)).stdout  # fmt: skip
    acked = {
        (int(e["partition"]), int(e["offset"]))  # type: ignore[call-overload]
        for e in _events(out)
        if e.get("name") == "producer_send_success"
    }
    assert len(acked) == n
    return acked


def _consumed(events: list[dict[str, object]]) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    for e in events:
        if e.get("name") != "records_consumed":
            continue
        for p in e["partitions"]:  # type: ignore[attr-defined]
            assert p["count"] == p["maxOffset"] - p["minOffset"] + 1
            seen += [(p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1)]
    return seen


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_java_producer_and_consumer_with_every_codec(
    broker: BrokerProcess, tmp_path: Path, codec: str
) -> None:
    topic = f"codec-{codec}"
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", topic, "--partitions", "2")
    acked = _verifiable_produce(broker, tmp_path, topic, 1000, **{
        "compression.type": codec, "enable.idempotence": "true", "retries": "2147483647",
        "linger.ms": "10",
    })  # fmt: skip
    out = kafka_tool(VERIFIABLE_CONSUMER, *_bs(broker), "--topic", topic, "--group-id",
                     f"g-{codec}", "--max-messages", "1000", "--reset-policy", "earliest",
                     timeout=180).stdout  # fmt: skip
    seen = _consumed(_events(out))
    assert len(seen) == len(set(seen)) and set(seen) == acked


def test_the_new_consumer_group_protocol_gets_a_clear_error(broker: BrokerProcess) -> None:
    """KIP-848's ConsumerGroupHeartbeat is not served (docs/jvm.md): a Java consumer with
    group.protocol=consumer is told to use the classic protocol, and consumes nothing."""
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", "kip848", "--partitions", "1")
    proc = kafka_tool(VERIFIABLE_CONSUMER, *_bs(broker), "--topic", "kip848", "--group-id",
                      "new-protocol", "--group-protocol", "consumer", "--max-messages", "1",
                      timeout=60, check=False)  # fmt: skip
    assert "does not support the new CONSUMER group protocol" in proc.stderr
    assert "group.protocol=classic" in proc.stderr
    assert not _consumed(_events(proc.stdout))


class Member:
    """A VerifiableConsumer running in the background; its JSON events as they come."""

    def __init__(self, broker: BrokerProcess, topic: str, group: str, *args: str) -> None:
        cmd = [
            shutil.which("java") or "java", "-Xmx256m", "-cp", kafka_classpath(),
            VERIFIABLE_CONSUMER, *_bs(broker), "--topic", topic, "--group-id", group,
            "--reset-policy", "earliest", *args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, text=True)  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def assignment(self) -> set[int] | None:
        """The partitions of the latest assignment event (None before the first)."""
        owned: set[int] | None = None
        for e in list(self.events):
            parts = {p["partition"] for p in e.get("partitions", [])}
            if e["name"] == "partitions_assigned":
                owned = (owned or set()) | parts
            elif e["name"] == "partitions_revoked" and owned is not None:
                owned -= parts
        return owned

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.parametrize(
    "assignor",
    ["org.apache.kafka.clients.consumer.RangeAssignor",
     "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"],
)  # fmt: skip
def test_java_consumer_group_splits_partitions_and_reads_each_record_once(
    broker: BrokerProcess, tmp_path: Path, assignor: str
) -> None:
    topic, group = f"split-{assignor[-10:].lower()}", f"split-{assignor[-10:].lower()}"
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", topic, "--partitions", "4")
    a = Member(broker, topic, group, "--assignment-strategy", assignor)
    b = None
    given: list[set[int] | None] = []
    try:
        _wait(lambda: a.assignment() == {0, 1, 2, 3}, 60, "the first member to own every partition")
        b = Member(broker, topic, group, "--assignment-strategy", assignor)
        members = (a, b)

        def balanced() -> bool:
            owned = [m.assignment() or set() for m in members]
            return all(len(o) == 2 for o in owned) and owned[0] | owned[1] == {0, 1, 2, 3}

        _wait(balanced, 60, "two members of two partitions each")
        given = [m.assignment() for m in members]
        acked = _verifiable_produce(broker, tmp_path, topic, 2000, **{"linger.ms": "5"})
        _wait(lambda: sum(len(_consumed(m.events)) for m in members) >= 2000, 60,
              "the group to consume every record")  # fmt: skip
    finally:
        a.stop()
        if b is not None:
            b.stop()
    seen = _consumed(a.events) + _consumed(b.events)
    assert len(seen) == len(set(seen)) and set(seen) == acked
    for m, owned in zip((a, b), given, strict=True):  # each read only what it was given
        assert {p for p, _ in _consumed(m.events)} <= (owned or set())


def test_a_static_member_restarting_within_its_session_causes_no_rebalance(
    broker: BrokerProcess,
) -> None:
    """Static membership (KIP-345, ``group.instance.id``): a member that leaves and comes
    back within ``session.timeout.ms`` gets its partitions back and the other member keeps
    its own, untouched."""
    topic = group = "static"
    kafka_tool(TOPIC_COMMAND, *_bs(broker), "--create", "--topic", topic, "--partitions", "2")
    args = ("--session-timeout", "30000")
    a = Member(broker, topic, group, "--group-instance-id", "a", *args)
    b = Member(broker, topic, group, "--group-instance-id", "b", *args)
    a2 = None
    try:
        _wait(lambda: len(a.assignment() or ()) == len(b.assignment() or ()) == 1, 60,
              "two members of one partition each")  # fmt: skip
        a_owned, b_owned = a.assignment(), b.assignment()
        b_events = len(b.events)
        a.proc.kill()  # no LeaveGroup: a static member is expected back
        a.proc.wait()
        a2 = Member(broker, topic, group, "--group-instance-id", "a", *args)
        _wait(lambda: a2.assignment() == a_owned, 30, "the restarted member to get its partition")
        time.sleep(3)  # time for a rebalance to show, if one happened
        later = b.events[b_events:]
        assert not [e for e in later if e["name"] in ("partitions_revoked", "partitions_assigned")]
        assert b.assignment() == b_owned
    finally:
        for m in (a, b, a2):
            if m is not None:
                m.stop()
