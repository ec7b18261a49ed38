"""The cluster demo (``./spark-submit.sh demo --brokers 3``): brokers in cluster mode over
one shared directory and an etcd, a partition leader SIGKILLed under a producer, Spark
reading the topic back and the history checker proving nothing acknowledged was lost."""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

from sparklog.demo import DemoReport, Say, expect, tidy

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_cluster(
    spark: SparkSession,
    data_dir: str,
    *,
    brokers: int = 3,
    seconds: float = 20,
    kills: int = 2,
    rate: int = 2000,
    keep: bool = False,
    say: Say = print,
) -> DemoReport:
    """The cluster demo (``./spark-submit.sh demo --brokers 3``): ``brokers`` brokers over
    one shared directory and an etcd, an idempotent producer writing throughout, the leader
    of a partition SIGKILLed ``kills`` times (and restarted), then Spark reading the whole
    topic from the shared storage, and the history checker proving every acknowledged
    record is there exactly once, at the offset it was acknowledged with."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    import sparklog.spark
    from sparklog.demo.checker import check
    from sparklog.demo.processes import BrokerCluster, EtcdCluster
    from sparklog.demo.workload import Workload

    sparklog.spark.register(spark)
    shutil.rmtree(data_dir, ignore_errors=True)
    report = DemoReport()
    topic, partitions = "payments", 6
    t_start = time.perf_counter()
    with (
        EtcdCluster(f"{data_dir}/etcd", members=1) as etcd,
        BrokerCluster(f"{data_dir}/shared", etcd.endpoints, brokers) as cluster,
    ):
        say(
            f"cluster: {brokers} brokers ({cluster.bootstrap}) over {cluster.data_dir}, "
            f"etcd at {etcd.endpoints}"
        )
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            f.result(30)
        leaders = _cluster_leaders(cluster, topic, partitions, avoid=None)
        say(f"topic {topic}: {partitions} partitions, leaders {leaders}")
        work = Workload(cluster.bootstrap, topic, rate=rate).start()
        pause = seconds / (kills + 1)
        time.sleep(pause)
        for k in range(kills):
            leaders = _cluster_leaders(cluster, topic, partitions, avoid=None)
            victim = leaders[k % partitions]
            led = [p for p, node in leaders.items() if node == victim]
            t0 = time.monotonic()
            cluster.brokers[victim].kill()
            back = {p: _next_ack(work, t0, p) for p in led}
            worst = max(back.values()) - t0
            report.add(
                f"failover   SIGKILL of broker {victim} (leader of partitions {led}): "
                f"each took writes again within {worst:.1f} s"
            )
            say(report.lines[-1])
            cluster.brokers[victim].start()
            time.sleep(pause)
        history = work.stop()
        report.add(
            f"produced   {len(history.acked):,} records acknowledged, "
            f"{len(history.failed):,} failed (idempotent, acks=all)"
        )
        say(report.lines[-1])
        df = spark.read.format("sparklog").option("subscribe", topic).load(cluster.data_dir)
        rows = df.select("partition", "offset", "value").orderBy("partition", "offset").collect()
        history.reads = [("spark", r["partition"], r["offset"], bytes(r["value"])) for r in rows]
        result = check(history)
        expect(result.valid, f"the history has anomalies: {result.summary()}")
        report.add(
            f"checked    Spark read {len(rows):,} records from the shared storage: "
            f"{result.summary()}"
        )
        say(report.lines[-1])
    report.timings["total"] = time.perf_counter() - t_start
    report.add(f"shutdown   cluster stopped; total {report.timings['total']:.0f} s")
    report.add(tidy(data_dir, None, keep=keep))
    return report


def _cluster_leaders(
    cluster: Any, topic: str, partitions: int, avoid: int | None
) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + 60
    while True:
        try:
            md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                topic, timeout=10
            )
        except Exception:  # a broker that cannot reach etcd closes Metadata connections
            expect(time.monotonic() < deadline, f"no metadata for {topic}")
            time.sleep(0.2)
            continue
        found = {p.id: p.leader for p in md.topics[topic].partitions.values()}
        if len(found) == partitions and all(n > 0 and n != avoid for n in found.values()):
            return found
        expect(time.monotonic() < deadline, f"partitions of {topic} have no leaders: {found}")
        time.sleep(0.2)


def _next_ack(work: Any, t0: float, partition: int, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while True:
        at = work.acked_since(t0, partition)
        if at is not None:
            return float(at)
        expect(time.monotonic() < deadline, f"partition {partition} took no write again")
        time.sleep(0.05)
