"""Spark over a cluster: the sink writes through three brokers while a leader is
SIGKILLed (each batch reaches the new leader, nothing is written twice); a streaming query
with the ``group`` option commits its offsets to the group's coordinator, wherever it is;
and ``groups describe`` finds them through any broker."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

import sparklog.spark
from sparklog.kafka import admin as kc
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

from .helpers import cluster_with_topic

pytestmark = pytest.mark.spark
TOPIC = "sinked"
PARTITIONS = 3


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[BrokerCluster]:
    with cluster_with_topic(etcd, tmp_path, TOPIC, PARTITIONS) as c:
        yield c


def leader_of(c: BrokerCluster, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return md.topics[TOPIC].partitions[partition].leader


def test_the_spark_sink_writes_every_row_once_across_a_leader_kill(
    spark: Any, cluster: BrokerCluster
) -> None:
    sparklog.spark.register(spark)
    bootstrap = cluster.bootstrap
    for run in range(4):
        rows = [(b"k%d" % i, b"%d-%d" % (run, i)) for i in range(5000)]
        df = spark.createDataFrame(rows, "key binary, value binary")
        (df.write.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", TOPIC).mode("append").save())  # fmt: skip
        if run == 1:
            victim = leader_of(cluster, 0)
            cluster.brokers[victim].kill()
    values = [
        bytes(r.value)
        for r in spark.read.format("sparklog").option("subscribe", TOPIC)
        .load(cluster.data_dir).select("value").collect()
    ]  # fmt: skip
    counts = Counter(values)
    assert len(counts) == 20_000 and max(counts.values()) == 1


def test_a_streaming_query_commits_its_group_offsets_to_the_coordinator(
    spark: Any, cluster: BrokerCluster, tmp_path: Path
) -> None:
    sparklog.spark.register(spark)
    rows = [(b"k%d" % i, b"v%d" % i) for i in range(600)]
    (spark.createDataFrame(rows, "key binary, value binary").write.format("sparklog")
        .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", TOPIC)
        .mode("append").save())  # fmt: skip
    seen: list[int] = []

    def collect(df: Any, _batch_id: int) -> None:
        seen.append(df.count())

    q = (
        spark.readStream.format("sparklog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("group", "spark-cluster")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .load(cluster.data_dir)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None and sum(seen) == 600
    for b in cluster.brokers.values():  # whichever broker is asked
        with KafkaClient(b.bootstrap) as c:
            doc = kc.describe_group(c, "spark-cluster", int(time.time() * 1000))
            assert sum(r["lag"] for r in doc["partitions"]) == 0, doc
            assert sum(r["committed_offset"] for r in doc["partitions"]) == 600, doc
            assert ("spark-cluster", "Empty") in kc.list_groups(c)
