from __future__ import annotations

import json
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import sparklog
from sparklog.cli.describe import kafka_uuid
from sparklog.storage import Storage
from sparklog.storage.lease import DATA_DIR
from sparklog_testkit.processes import BrokerProcess
from tests.cli.helpers import run


def test_console_script_is_declared() -> None:
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts["sparklog"] == "sparklog.cli:main"


def test_version() -> None:
    out = run("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"sparklog {sparklog.__version__}"


def test_create_list_describe_delete(root: str) -> None:
    created = run(
        "topics",
        "create",
        "orders",
        "--partitions",
        "3",
        "--config",
        "cleanup.policy=compact",
        "--data-dir",
        root,
    )
    assert created.returncode == 0, created.stderr
    assert "orders" in created.stdout
    assert run("topics", "list", "--data-dir", root).stdout.split() == ["orders"]
    described = run("topics", "describe", "orders", "--json", "--data-dir", root)
    doc = json.loads(described.stdout)
    assert doc["partitions"] == 3
    assert doc["configs"]["cleanup.policy"] == "compact"
    assert [p["high_watermark"] for p in doc["partition_state"]] == [0, 0, 0]
    assert run("topics", "delete", "orders", "--data-dir", root).returncode == 0
    assert run("topics", "list", "--data-dir", root).stdout.split() == []


def test_invalid_topic_name_is_a_clear_error(root: str) -> None:
    out = run("topics", "create", "../escape", "--data-dir", root)
    assert out.returncode == 2
    assert "illegal characters" in out.stderr
    assert "Traceback" not in out.stderr
    assert not os.path.exists(os.path.join(os.path.dirname(root), "escape"))


def test_unknown_config_is_a_clear_error(root: str) -> None:
    out = run("topics", "create", "t", "--config", "retention.mss=1", "--data-dir", root)
    assert out.returncode == 2
    assert "retention.mss" in out.stderr


def test_malformed_config_pair(root: str) -> None:
    out = run("topics", "create", "t", "--config", "novalue", "--data-dir", root)
    assert out.returncode == 2
    assert "NAME=VALUE" in out.stderr


def test_describe_unknown_topic(root: str) -> None:
    Storage(root).topics.create("other", 1)  # storage, without the topic
    out = run("topics", "describe", "nope", "--data-dir", root)
    assert out.returncode == 1
    assert "does not exist" in out.stderr


def test_create_refuses_while_another_process_holds_the_data_dir(root: str) -> None:
    with Storage(root).leases.acquire(DATA_DIR, "test"):
        out = run("topics", "create", "t", "--data-dir", root)
    assert out.returncode == 1
    assert "locked" in out.stderr


@pytest.mark.parametrize("action", [["list"], ["describe", "t"], ["delete", "t"]])
def test_a_data_dir_without_storage_is_an_error_naming_it(
    tmp_path: Path, action: list[str]
) -> None:
    missing = str(tmp_path / "nope")
    out = run("topics", *action, "--data-dir", missing)
    assert out.returncode == 2
    assert f"{missing}: no sparklog storage here" in out.stderr


def test_a_data_dir_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    out = run("topics", "list", "--data-dir", str(f))
    assert out.returncode == 2 and "is a file" in out.stderr


def test_alter_changes_and_resets_configs_offline(root: str) -> None:
    assert (
        run(
            "topics", "create", "orders", "--config", "retention.ms=5", "--data-dir", root
        ).returncode
        == 0
    )
    out = run("topics", "alter", "orders", "--config", "cleanup.policy=compact",
              "--delete-config", "retention.ms", "--data-dir", root)  # fmt: skip
    assert out.returncode == 0, out.stderr
    config = Storage(root).topics.get("orders").config
    assert (config.cleanup_policy, config.retention_ms) == ("compact", 604_800_000)
    bad = run("topics", "alter", "orders", "--config", "retention.ms=soon", "--data-dir", root)
    assert bad.returncode == 2 and "retention.ms" in bad.stderr


def test_a_bootstrap_server_without_a_port_names_the_option() -> None:
    out = run("topics", "list", "--bootstrap-server", "127.0.0.1")
    assert out.returncode == 2 and "--bootstrap-server" in out.stderr and "listen" not in out.stderr


def test_long_offline_operations_say_how_far_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    from sparklog.cli.topics import Ticker

    tick = Ticker("delete t", quiet_s=0, every_s=0)
    for done in range(3):
        tick(done, 3)
    tick(3, 3)  # finished: nothing more to say
    assert capsys.readouterr().err.splitlines() == [
        "delete t: 0 of 3 partitions", "delete t: 1 of 3 partitions", "delete t: 2 of 3 partitions"
    ]  # fmt: skip
    quiet = Ticker("describe t")  # the first 2 s say nothing: most runs are quicker
    quiet(1, 3)
    assert capsys.readouterr().err == ""


def test_describe_prints_kafkas_lines_offline(root: str) -> None:
    """As ``kafka-topics.sh --describe`` prints a topic (its fields checked against Kafka
    4.3.1's TopicCommand, see ``sparklog.cli.describe``): a first line, then one per
    partition, tab-separated; offline there is no leader, and sparklog adds its offsets
    and what is on disk."""
    storage = Storage(root)
    storage.topics.create("orders", 2, {"cleanup.policy": "compact"})
    meta = storage.topics.get("orders")
    out = run("topics", "describe", "orders", "--data-dir", root)
    assert out.returncode == 0, out.stderr
    first, *parts = out.stdout.splitlines()
    assert first.split("\t") == [
        "Topic: orders", f"TopicId: {kafka_uuid(meta.topic_id)}", "PartitionCount: 2",
        "Configs: cleanup.policy=compact",
    ]  # fmt: skip
    assert [p.split("\t") for p in parts] == [
        ["", "Topic: orders", f"Partition: {i}", "LogStartOffset: 0", "HighWatermark: 0",
         "Segments: 1", "Bytes: 0"]
        for i in range(2)
    ]  # fmt: skip


def test_a_topic_id_is_printed_as_kafka_prints_a_uuid() -> None:
    # Kafka's Uuid.toString: base64url of the 16 bytes, unpadded (22 characters)
    assert kafka_uuid("0" * 31 + "1") == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert kafka_uuid("ffffffffffffffffffffffffffffffff") == "_____________________w"


def test_describe_through_a_broker_prints_kafkas_lines_with_leaders_and_offsets(
    tmp_path: Path,
) -> None:
    """The lines of ``kafka-topics.sh --describe``, with sparklog's offsets after Kafka's
    fields; only configs not at their default are listed, as Kafka lists them. Checked by
    running Kafka 4.3.1's TopicCommand against Kafka 4.3.1 and against sparklog: the same
    fields, in this order, and the same TopicId for a sparklog topic (against sparklog it
    prints ``Elr: N/A``, having no DescribeTopicPartitions to ask; Kafka's own are empty)."""
    from confluent_kafka import Producer

    with BrokerProcess(str(tmp_path / "data")) as broker:
        b = ("--bootstrap-server", broker.bootstrap)
        created = run("topics", "create", "orders", "--partitions", "2", "--config",
                      "cleanup.policy=compact", *b)  # fmt: skip
        assert created.returncode == 0, created.stderr
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(7):
            p.produce("orders", key=b"k%d" % i, value=b"v%d" % i, partition=1)
        assert p.flush(30) == 0
        out = run("topics", "describe", "orders", *b)
        doc = json.loads(run("topics", "describe", "orders", "--json", *b).stdout)
    assert out.returncode == 0, out.stderr
    first, *parts = out.stdout.splitlines()
    assert first.split("\t") == [
        "Topic: orders", f"TopicId: {kafka_uuid(doc['topic_id'])}", "PartitionCount: 2",
        "ReplicationFactor: 1", "Configs: cleanup.policy=compact",
    ]  # fmt: skip
    assert [p.split("\t") for p in parts] == [
        ["", "Topic: orders", f"Partition: {i}", "Leader: 0", "Replicas: 0", "Isr: 0", "Elr: ",
         "LastKnownElr: ", "LogStartOffset: 0", f"HighWatermark: {hw}"]
        for i, hw in ((0, 0), (1, 7))
    ]  # fmt: skip
