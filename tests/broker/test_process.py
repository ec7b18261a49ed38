"""The broker as a process: start/stop lines, the data-dir lock, SIGTERM, leader epochs,
and the CLI's --bootstrap-server path."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from sparklog.storage import Storage
from sparklog.storage.checkpoints import read_leader_epochs
from sparklog.storage.owner import Owner
from sparklog.storage.records import make_records

from .conftest import BrokerProcess


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args], capture_output=True, text=True, timeout=60
    )


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert p.flush(20) == 0


def test_start_and_stop_each_log_one_line(broker: BrokerProcess) -> None:
    assert broker.stop() == 0
    started = [line for line in broker.lines if "listening on" in line]
    stopped = [line for line in broker.lines if "stopped" in line]
    assert len(started) == 1 and f"127.0.0.1:{broker.port}" in started[0]
    assert len(stopped) == 1 and f":{broker.port}" in stopped[0]


def test_second_broker_on_the_same_data_dir_refuses_to_start(broker: BrokerProcess) -> None:
    second = BrokerProcess(broker.data_dir)
    with pytest.raises(RuntimeError, match="locked by another process"):
        second.start(timeout=20)
    assert broker.alive


def test_the_lock_error_names_the_holder_as_a_person_reads_it(broker: BrokerProcess) -> None:
    """Who holds the data dir (node id, pid, host) and since when, not the raw lock line."""
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "broker", "start", "--data-dir",
         broker.data_dir, "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    error = out.stderr.strip().splitlines()[-1]
    assert error.startswith("sparklog: error: "), out.stderr
    assert f"(broker 0, pid {broker.pid} on host {socket.gethostname()}, since 20" in error
    assert "epoch=" not in error and "since=" not in error


def test_sigterm_keeps_every_acknowledged_record(broker: BrokerProcess) -> None:
    _produce(broker.bootstrap, "durable", 200)
    assert broker.stop() == 0
    view = Storage(broker.data_dir).reader("durable", 0).view()
    values = [v for b in view.batches(0) for v in b.column("value").to_pylist()]
    assert values == [b"v%d" % i for i in range(200)]


def test_every_start_begins_a_new_leader_epoch(broker: BrokerProcess) -> None:
    _produce(broker.bootstrap, "epochs", 3)
    broker.stop()
    broker.restart()
    _produce(broker.bootstrap, "epochs", 2)
    broker.stop()
    storage = Storage(broker.data_dir)
    epochs = read_leader_epochs(storage.fs, storage.reader("epochs", 0).path)
    assert epochs == [(0, 0), (1, 3)]


def test_cli_topics_through_the_broker(broker: BrokerProcess) -> None:
    b = ["--bootstrap-server", broker.bootstrap]
    created = cli("topics", "create", "orders", "--partitions", "3", "--config",
                  "cleanup.policy=compact", *b)  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert cli("topics", "list", *b).stdout.split() == ["orders"]
    doc = json.loads(cli("topics", "describe", "orders", "--json", *b).stdout)
    assert doc["partitions"] == 3
    assert doc["configs"]["cleanup.policy"] == "compact"
    assert [p["high_watermark"] for p in doc["partition_state"]] == [0, 0, 0]
    dup = cli("topics", "create", "orders", *b)
    assert dup.returncode == 1 and "TOPIC_ALREADY_EXISTS" in dup.stderr
    bad = cli("topics", "create", "../escape", *b)
    assert bad.returncode == 1 and "INVALID_TOPIC_EXCEPTION" in bad.stderr
    assert cli("topics", "delete", "orders", *b).returncode == 0
    assert cli("topics", "list", *b).stdout.split() == []


def test_cli_describe_reports_offsets(broker: BrokerProcess) -> None:
    _produce(broker.bootstrap, "counted", 7)
    doc = json.loads(cli("topics", "describe", "counted", "--json", "--bootstrap-server",
                         broker.bootstrap).stdout)  # fmt: skip
    assert doc["partition_state"][0]["high_watermark"] == 7


def test_cli_without_a_broker_is_a_clear_error() -> None:
    out = cli("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert out.returncode == 1
    assert "cannot connect" in out.stderr


def test_cli_needs_exactly_one_target(tmp_path: object) -> None:
    out = cli("topics", "list")
    assert out.returncode == 2
    assert "--bootstrap-server" in out.stderr


def test_sigterm_with_clients_connected_logs_no_error(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    _produce(broker.bootstrap, "busy", 50)
    consumers = []
    for g in ("g1", "g2"):
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": g,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "socket.timeout.ms": 2000,
            }
        )  # fmt: skip  (closing after the broker)
        c.subscribe(["busy"])
        consumers.append(c)
    try:
        for _ in range(30):  # members joined and long-polling fetches in flight
            for c in consumers:
                c.poll(0.1)
        assert broker.stop() == 0
    finally:
        for c in consumers:
            c.close()
    assert not [ln for ln in broker.lines if " ERROR " in ln or "Traceback" in ln], broker.lines


def _descriptors(pid: int) -> list[str]:
    """Where each open file descriptor of process ``pid`` points."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed while listing
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


def _partition_descriptors(pid: int, data_dir: str, topic: str) -> list[str]:
    prefix = os.path.join(os.path.realpath(data_dir), "topics", topic) + os.sep
    return [t for t in _descriptors(pid) if t.startswith(prefix)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_deleted_topics_leave_no_open_files(broker: BrokerProcess) -> None:
    """Topics created, written and deleted leave no descriptor on a deleted file, and a
    live partition holds a bounded number of descriptors (docs/ARCHITECTURE.md)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [f"t{i}" for i in range(10)]
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1})
    for t in topics:
        for part in range(3):
            p.produce(t, value=b"x", partition=part)
    assert p.flush(30) == 0
    live = _partition_descriptors(broker.pid, broker.data_dir, "t0")
    assert 0 < len(live) <= 3 * 3, live  # 3 partitions: active segment and its two indexes
    for f in admin.delete_topics(topics).values():
        f.result(30)
    deadline = time.monotonic() + 30
    while True:
        deleted = [t for t in _descriptors(broker.pid) if t.endswith(" (deleted)")]
        if not deleted or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert deleted == []
    assert _partition_descriptors(broker.pid, broker.data_dir, "t0") == []


def test_a_data_dir_that_is_a_file_is_refused_saying_so(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    out = cli("broker", "start", "--data-dir", str(afile), "--listen", "127.0.0.1:0")
    assert out.returncode == 2, out.stderr
    assert f"{afile}: the data dir is a file, not a directory" in out.stderr
    assert "Errno" not in out.stderr


def test_a_broker_whose_port_is_taken_creates_no_data_dir(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "new-data"
        out = cli("broker", "start", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}")
    assert out.returncode == 1, out.stderr
    assert "address already in use" in out.stderr
    assert not data.exists()


def test_a_root_without_an_owner_record_is_adopted(broker: BrokerProcess) -> None:
    """A root written before owner records existed starts, and is then owned."""
    _produce(broker.bootstrap, "old", 3)
    broker.stop()
    record = os.path.join(broker.data_dir, "owner.json")
    os.unlink(record)
    broker.restart()
    _produce(broker.bootstrap, "old", 2)
    assert json.loads(Path(record).read_text())["mode"] == "embedded"


def _produce_error(bootstrap: str, topic: str) -> KafkaError | None:
    """The delivery error of one acks=all record sent without retries (None: acked)."""
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                  "enable.idempotence": False, "linger.ms": 0})  # fmt: skip
    p.produce(topic, value=b"late", on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(30) == 0
    return errors[0]


def _stopped_acknowledging(broker: BrokerProcess) -> str | None:
    return broker.wait_for_line(
        lambda ln: " ERROR " in ln and "stops acknowledging writes to every partition" in ln,
        timeout=30,
    )


def test_an_embedded_broker_stops_acknowledging_once_a_partition_is_taken_over(
    broker: BrokerProcess,
) -> None:
    """A cluster broker of an older sparklog (no owner check) taking a partition over, as
    in the report: the embedded broker finds the newer epoch, logs why and acknowledges no
    more writes, on any partition, and deletes nothing. KAFKA_STORAGE_ERROR is the answer
    Kafka's ReplicaManager gives for a partition whose log dir it took offline (read in its
    source, not run against Kafka here)."""
    _produce(broker.bootstrap, "shared", 5)
    _produce(broker.bootstrap, "other", 1)
    storage = Storage(broker.data_dir)
    foreign = storage.open_log("shared", 0, leader_epoch=7, writer="cluster broker 1")
    foreign.append(make_records([b"theirs"]))
    line = _stopped_acknowledging(broker)
    assert line is not None and "committed leader epoch 7" in line, broker.lines[-5:]
    for topic in ("shared", "other"):
        err = _produce_error(broker.bootstrap, topic)
        assert err is not None and err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    view = storage.reader("shared", 0).view()
    values = [v for b in view.batches(0) for v in b.column("value").to_pylist()]
    assert values == [b"v%d" % i for i in range(5)] + [b"theirs"]
    foreign.close()


def test_an_embedded_broker_stops_acknowledging_once_its_owner_record_changes(
    broker: BrokerProcess,
) -> None:
    _produce(broker.bootstrap, "t", 1)
    record = os.path.join(broker.data_dir, "owner.json")
    # replaced in one step: the broker re-reading it between a delete and a create would
    # claim it again
    Path(record + ".new").write_bytes(Owner.of_cluster("prod", "127.0.0.1:1").to_json())
    os.replace(record + ".new", record)
    line = _stopped_acknowledging(broker)
    assert line is not None and "cluster 'prod'" in line, broker.lines[-5:]
    err = _produce_error(broker.bootstrap, "t")
    assert err is not None and err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
