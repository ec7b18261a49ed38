"""Kafka's Java ``VerifiableProducer`` and ``VerifiableConsumer`` (4.3.1, from the Maven
jars) against three brokers while the leader of a partition is SIGKILLed: every record the
Java producer had acknowledged is read by the Java consumer group exactly once, and is
stored at the offset it was acknowledged with (checked with ``checker.check``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog.jars import kafka_classpath
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from ..jvm.tools import VERIFIABLE_CONSUMER, VERIFIABLE_PRODUCER, kafka_tool
from .helpers import cluster_with_topic, leaders

pytestmark = pytest.mark.jvm
TOPIC = "verified"
PARTITIONS = 3


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, PARTITIONS) as c:
        yield c


def events(out: str) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def test_java_verifiable_producer_and_consumer_lose_nothing_across_a_leader_kill(
    cluster: BrokerCluster, tmp_path: Path
) -> None:
    conf = tmp_path / "producer.properties"
    conf.write_text("enable.idempotence=true\nretries=2147483647\nlinger.ms=5\n"
                    "delivery.timeout.ms=120000\nmetadata.max.age.ms=1000\n")  # fmt: skip
    java = shutil.which("java") or "java"
    producer = subprocess.Popen(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(),
         VERIFIABLE_PRODUCER, "--bootstrap-server", cluster.bootstrap, "--topic", TOPIC,
         "--max-messages", "3000", "--throughput", "300", "--acks", "-1",
         "--command-config", str(conf)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    time.sleep(5)
    victim = leaders(cluster.bootstrap, TOPIC, PARTITIONS)[0]
    cluster.brokers[victim].kill()
    leaders(cluster.bootstrap, TOPIC, PARTITIONS, avoid=victim)
    cluster.brokers[victim].start()
    out, err = producer.communicate(timeout=180)
    sent = [e for e in events(out) if e.get("name") == "producer_send_success"]
    assert len(sent) == 3000, err[-3000:]
    work = Workload(cluster.bootstrap, TOPIC)
    history = work.history
    for e in sent:
        value = str(e["value"]).encode()
        history.sends.append(("java", e.get("key"), value))
        history.acked[value] = (int(str(e["partition"])), int(str(e["offset"])))
    work.read_all()
    report = check(history)
    assert report.valid, report.summary()
    consumed = kafka_tool(VERIFIABLE_CONSUMER, "--bootstrap-server", cluster.bootstrap,
                          "--topic", TOPIC, "--group-id", "verifiers", "--max-messages",
                          "3000", "--reset-policy", "earliest", timeout=180).stdout  # fmt: skip
    seen: list[tuple[int, int]] = []
    for e in events(consumed):
        if e.get("name") == "records_consumed":
            for p in e["partitions"]:  # type: ignore[attr-defined]
                seen += [(p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1)]
    assert len(seen) == len(set(seen)) and set(seen) == set(history.acked.values())
