"""Real clients across a leader kill on a cluster on object storage: three brokers that
share nothing but SeaweedFS and etcd, each its own cache directory, the victim's deleted
after its SIGKILL (the machine is gone).

- Kafka's Java ``VerifiableProducer`` and ``VerifiableConsumer`` (4.3.1, from the Maven
  jars), as tests/cluster/test_java_verifiable.py runs them on a shared directory: every
  record the Java producer had acknowledged is stored at the offset it was acknowledged
  with, read exactly once (``checker.check``), and consumed once by the Java group.
- The Spark sink (``format("sparklog")`` writes to the brokers), as
  tests/cluster/test_spark_cluster.py runs it: every row once; then Spark reads the topic
  from the ``s3://`` root itself, which shows the sealed prefix only, so the topic has
  ``segment.ms`` 2000 and the test waits until every partition is sealed to its end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

import sparklog.spark
from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog.jars import kafka_classpath
from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from ..jvm.tools import VERIFIABLE_CONSUMER, VERIFIABLE_PRODUCER, kafka_tool
from ..support.s3 import SeaweedS3
from .helpers import broker_logs, leaders, lose_machine, s3_cluster_with_topic

TOPIC = "clients"
PARTITIONS = 3


@pytest.fixture
def s3_cluster(etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path) -> Iterator[BrokerCluster]:
    configs = {"segment.ms": "2000"}  # Spark reads the sealed prefix: seal soon
    with s3_cluster_with_topic(etcd, s3_server, tmp_path, TOPIC, PARTITIONS, configs=configs) as c:
        try:
            yield c
        finally:
            broker_logs(c, tmp_path / "brokers.log")


def events(out: str) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


@pytest.mark.jvm
def test_java_verifiable_clients_lose_nothing_across_a_leader_lost_with_its_cache(
    s3_cluster: BrokerCluster, tmp_path: Path
) -> None:
    conf = tmp_path / "producer.properties"
    conf.write_text("enable.idempotence=true\nretries=2147483647\nlinger.ms=5\n"
                    "delivery.timeout.ms=120000\nmetadata.max.age.ms=1000\n")  # fmt: skip
    java = shutil.which("java") or "java"
    producer = subprocess.Popen(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", kafka_classpath(),
         VERIFIABLE_PRODUCER, "--bootstrap-server", s3_cluster.bootstrap, "--topic", TOPIC,
         "--max-messages", "3000", "--throughput", "300", "--acks", "-1",
         "--command-config", str(conf)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    time.sleep(5)
    victim = leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS)[0]
    lose_machine(s3_cluster, victim)
    leaders(s3_cluster.bootstrap, TOPIC, PARTITIONS, avoid=victim)
    s3_cluster.brokers[victim].start()  # a new machine: an empty cache directory
    out, err = producer.communicate(timeout=180)
    sent = [e for e in events(out) if e.get("name") == "producer_send_success"]
    assert len(sent) == 3000, err[-3000:]
    work = Workload(s3_cluster.bootstrap, TOPIC)
    history = work.history
    for e in sent:
        value = str(e["value"]).encode()
        history.sends.append(("java", e.get("key"), value))
        history.acked[value] = (int(str(e["partition"])), int(str(e["offset"])))
    work.read_all()
    report = check(history)
    assert report.valid, report.summary()
    consumed = kafka_tool(VERIFIABLE_CONSUMER, "--bootstrap-server", s3_cluster.bootstrap,
                          "--topic", TOPIC, "--group-id", "verifiers", "--max-messages",
                          "3000", "--reset-policy", "earliest", timeout=180).stdout  # fmt: skip
    seen: list[tuple[int, int]] = []
    for e in events(consumed):
        if e.get("name") == "records_consumed":
            for p in e["partitions"]:  # type: ignore[attr-defined]
                seen += [(p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1)]
    assert len(seen) == len(set(seen)) and set(seen) == set(history.acked.values())


@pytest.fixture
def s3_spark(spark: Any, s3_server: SeaweedS3) -> Iterator[Any]:
    """The run's SparkSession with the S3 server's ``AWS_*`` variables in the driver and in
    ``sc.environment`` (how they reach the Python workers that plan and read), and
    ``format("sparklog")`` registered after them; taken out again afterwards."""
    sc = spark.sparkContext
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_server.env().items():
            mp.setenv(name, value)
            mp.setitem(sc.environment, name, value)
        sparklog.spark.register(spark)
        yield spark
    sparklog.spark.register(spark)


def end_offsets(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(TOPIC, p), 10)[1] for p in range(PARTITIONS)
        }
    finally:
        c.close()


def wait_sealed(root: str, ends: dict[int, int], timeout: float = 120) -> None:
    """Until every partition's sealed prefix in the bucket reaches its end offset."""
    deadline = time.monotonic() + timeout
    while True:
        storage = Storage(root)  # fresh: nothing remembered of the last look
        sealed = {p: storage.reader(TOPIC, p).view().high_watermark for p in ends}
        if all(sealed[p] >= end for p, end in ends.items()):
            return
        assert time.monotonic() < deadline, f"sealed {sealed}, ends {ends}"
        time.sleep(0.5)


@pytest.mark.spark
def test_the_spark_sink_writes_every_row_once_across_a_leader_lost_with_its_cache(
    s3_spark: Any, s3_cluster: BrokerCluster
) -> None:
    bootstrap = s3_cluster.bootstrap
    for run in range(4):
        rows = [(b"k%d" % i, b"%d-%d" % (run, i)) for i in range(5000)]
        df = s3_spark.createDataFrame(rows, "key binary, value binary")
        (df.write.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", TOPIC).mode("append").save())  # fmt: skip
        if run == 1:
            lose_machine(s3_cluster, leaders(bootstrap, TOPIC, PARTITIONS)[0])
    ends = end_offsets(s3_cluster.bootstrap)
    assert sum(ends.values()) == 20_000, ends
    wait_sealed(s3_cluster.data_dir, ends)
    values = [
        bytes(r.value)
        for r in s3_spark.read.format("sparklog").option("subscribe", TOPIC)
        .load(s3_cluster.data_dir).select("value").collect()
    ]  # fmt: skip
    counts = Counter(values)
    assert len(counts) == 20_000 and max(counts.values()) == 1
