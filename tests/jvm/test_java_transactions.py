"""Transactions with Kafka's Java clients and tools against a sparklog broker: Kafka's own
``TransactionalMessageCopier`` (the consume-transform-produce loop of Kafka's
exactly-once system tests: a read_committed consumer, a transactional producer, offsets
sent to each transaction, random aborts) copies a topic exactly once, also across a SIGKILL
of the broker; ``kafka-transactions`` lists and describes transactions."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.jars import kafka_classpath
from sparklog_testkit.processes import BrokerProcess

from .tools import TOOLS, kafka_tool

pytestmark = pytest.mark.jvm

COPIER = TOOLS + "TransactionalMessageCopier"
TRANSACTIONS = TOOLS + "TransactionsCommand"
N = 3000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path / "data")).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("in", 1, 1), NewTopic("out", 1, 1)]).values():
        f.result()
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(N):
        p.produce("in", value=str(i).encode())
    p.flush()
    yield b
    b.stop()


class Copier:
    """The copier in a JVM, its progress read from its JSON status lines."""

    def __init__(self, broker: BrokerProcess, tid: str = "copier-1") -> None:
        java = shutil.which("java") or "java"
        self.proc = subprocess.Popen(
            [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(), COPIER,
             "--broker-list", broker.bootstrap, "--input-topic", "in", "--input-partition", "0",
             "--output-topic", "out", "--max-messages", str(N), "--consumer-group", "copier",
             "--transaction-size", "100", "--transactional-id", tid, "--enable-random-aborts",
             "--transaction-timeout", "15000", "--use-group-metadata"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        self.processed = 0
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("{"):
                self.processed = int(json.loads(line).get("totalProcessed", self.processed))

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def _committed_output(broker: BrokerProcess) -> list[int]:
    c = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"check-{time.time()}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    c.subscribe(["out"])
    got: list[int] = []
    last = time.monotonic()
    while time.monotonic() - last < 4:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(int(m.value()))
            last = time.monotonic()
    c.close()
    return got


def test_the_java_copier_copies_a_topic_exactly_once(broker: BrokerProcess) -> None:
    copier = Copier(broker)
    assert copier.wait() == 0, copier.lines[-20:]
    got = _committed_output(broker)
    assert sorted(got) == list(range(N))  # every record once, aborted attempts invisible


def test_the_java_copier_is_exactly_once_across_a_broker_sigkill(broker: BrokerProcess) -> None:
    copier = Copier(broker)
    deadline = time.monotonic() + 120
    while copier.processed < N // 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert copier.processed < N, "the copier finished before the broker could be killed"
    broker.kill()
    broker.start()
    assert copier.wait() == 0, copier.lines[-20:]
    got = _committed_output(broker)
    assert sorted(got) == list(range(N))


def test_kafka_transactions_lists_and_describes(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "shown"})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("out", value=b"x")
    p.flush()
    listed = kafka_tool(TRANSACTIONS, "--bootstrap-server", broker.bootstrap, "list").stdout
    assert "shown" in listed and "Ongoing" in listed
    described = kafka_tool(TRANSACTIONS, "--bootstrap-server", broker.bootstrap, "describe",
                           "--transactional-id", "shown").stdout  # fmt: skip
    assert "Ongoing" in described and "out-0" in described
    missing = kafka_tool(TRANSACTIONS, "--bootstrap-server", broker.bootstrap, "describe",
                         "--transactional-id", "nobody", check=False)  # fmt: skip
    assert missing.returncode != 0
    assert "could not be found" in missing.stdout + missing.stderr
    p.commit_transaction(15)


def test_kafka_transactions_describes_producers_and_finds_no_hanging_ones(
    broker: BrokerProcess,
) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "described-p"})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("out", value=b"x", partition=0)
    p.flush()
    bs = ("--bootstrap-server", broker.bootstrap)
    out = kafka_tool(TRANSACTIONS, *bs, "describe-producers", "--topic", "out",
                     "--partition", "0").stdout  # fmt: skip
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0][:2] == ["ProducerId", "ProducerEpoch"]
    assert any(row[-1] == "0" for row in lines[1:])  # CurrentTransactionStartOffset 0
    p.commit_transaction(15)
    hanging = kafka_tool(TRANSACTIONS, *bs, "find-hanging", "--broker-id", "0").stdout
    assert "described-p" not in hanging
