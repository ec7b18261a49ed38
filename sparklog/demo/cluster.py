"""The cluster demo (``./spark-submit.sh demo --brokers 3``): brokers in cluster mode and an
etcd, partition leaders SIGKILLed under a producer, Spark reading the topic back and the
history checker proving nothing acknowledged was lost.

Two storages: ``local`` (the default), the brokers over one shared directory; ``s3``
(``--storage s3``), the log on object storage: a SeaweedFS bucket (``seaweed``), each
broker with its own cache directory, sharing nothing but the bucket and etcd, and each
killed leader's cache directory deleted with it (its machine is gone). Everything runs on
loopback, with its files under the demo's directory.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from typing import TYPE_CHECKING, Any

from sparklog.demo import DemoReport, Say, expect, tidy

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the storages of the cluster demo (``--storage``)
STORAGES = ("local", "s3")
#: ``--storage s3``: the topic's ``segment.ms`` (a broker on object storage rolls and seals
#: a quiet partition once it passed; readers of the bucket see sealed segments only)
SEGMENT_MS = 2000
_BUCKET = "sparklog-demo"


def run_cluster(
    spark: SparkSession,
    data_dir: str,
    *,
    brokers: int = 3,
    seconds: float = 20,
    kills: int = 2,
    rate: int = 2000,
    storage: str = "local",
    keep: bool = False,
    say: Say = print,
) -> DemoReport:
    """The cluster demo (``./spark-submit.sh demo --brokers 3 [--storage s3]``): ``brokers``
    brokers and an etcd over ``storage`` (module docstring), an idempotent producer writing
    for ``seconds``, the leader of a partition SIGKILLed ``kills`` times (on ``s3`` its
    cache directory deleted too) and restarted, then Spark reading the whole topic from
    the storage root, and the history checker proving every acknowledged record is there
    exactly once, at the offset it was acknowledged with."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    import sparklog.spark
    from sparklog.demo.checker import check
    from sparklog.demo.processes import BrokerCluster, EtcdCluster
    from sparklog.demo.workload import Workload

    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {', '.join(STORAGES)}, got {storage!r}")
    on_s3 = storage == "s3"
    shutil.rmtree(data_dir, ignore_errors=True)
    report = DemoReport()
    topic, partitions = "payments", 6
    t_start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        etcd = stack.enter_context(EtcdCluster(f"{data_dir}/etcd", members=1))
        root = _s3_root(spark, data_dir, stack, say) if on_s3 else f"{data_dir}/shared"
        sparklog.spark.register(spark)  # after the AWS_* variables: its workers get them
        cluster = BrokerCluster(root, etcd.endpoints, brokers)
        caches = {i: f"{data_dir}/cache{i}" for i in cluster.brokers} if on_s3 else {}
        for i, cache in caches.items():
            b = cluster.brokers[i]
            b.extra = (*b.extra, "--cache-dir", cache)
        stack.enter_context(cluster)
        where = "each with its own cache directory, " if on_s3 else ""
        say(
            f"cluster: {brokers} brokers ({cluster.bootstrap}) over {root}, {where}"
            f"etcd at {etcd.endpoints}"
        )
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        configs = {"segment.ms": str(SEGMENT_MS)} if on_s3 else {}
        for f in admin.create_topics([NewTopic(topic, partitions, 1, config=configs)]).values():
            f.result(30)
        del admin  # its client would log every broker the demo stops
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
            fault = f"SIGKILL of broker {victim}"
            if on_s3:
                shutil.rmtree(caches[victim])  # its machine is gone, and its disk with it
                fault += " and deletion of its cache directory"
            back = {p: _next_ack(work, t0, p) for p in led}
            worst = max(back.values()) - t0
            report.add(
                f"failover   {fault} (leader of partitions {led}): each took writes again "
                f"within {worst:.1f} s"
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
        if on_s3:
            report.add(_wait_sealed(root, topic, work.end_offsets()))
            say(report.lines[-1])
        df = spark.read.format("sparklog").option("subscribe", topic).load(root)
        rows = df.select("partition", "offset", "value").orderBy("partition", "offset").collect()
        history.reads = [("spark", r["partition"], r["offset"], bytes(r["value"])) for r in rows]
        result = check(history)
        expect(result.valid, f"the history has anomalies: {result.summary()}")
        source = "the bucket" if on_s3 else "the shared storage"
        report.add(f"checked    Spark read {len(rows):,} records from {source}: {result.summary()}")
        say(report.lines[-1])
    report.timings["total"] = time.perf_counter() - t_start
    report.add(f"shutdown   cluster stopped; total {report.timings['total']:.0f} s")
    report.add(tidy(data_dir, None, keep=keep))
    return report


def _s3_root(spark: SparkSession, data_dir: str, stack: contextlib.ExitStack, say: Say) -> str:
    """Start SeaweedFS under ``data_dir`` (stopped by ``stack``) and hand its endpoint and
    credentials, as the standard ``AWS_*`` variables, to this process (the brokers it
    starts inherit them) and to Spark's Python workers (``sc.environment``, what
    ``spark.executorEnv.*`` fills); the storage root in its bucket."""
    import os

    from sparklog.demo.seaweed import SeaweedS3

    s3 = stack.enter_context(SeaweedS3(f"{data_dir}/seaweed", _BUCKET))
    for name, value in s3.env().items():
        os.environ[name] = value
        spark.sparkContext.environment[name] = value
    say(f"bucket: {_BUCKET} on SeaweedFS ({s3.endpoint}), its data in {s3.work_dir}")
    return f"s3://{_BUCKET}/sparklog"


def _wait_sealed(root: str, topic: str, ends: dict[int, int], timeout: float = 120) -> str:
    """Wait until a reader of the bucket sees every partition up to ``ends`` (the brokers'
    high watermarks): readers see the sealed prefix, which a broker extends once a quiet
    partition's ``segment.ms`` passed. The report line."""
    from sparklog.storage import Storage

    storage = Storage(root).require()
    readers = {p: storage.reader(topic, p) for p in ends}
    t0 = time.monotonic()
    while True:
        behind = {p: end for p, end in ends.items() if readers[p].view().high_watermark < end}
        if not behind:
            break
        expect(
            time.monotonic() - t0 < timeout,
            f"partitions not sealed up to their high watermarks {behind} in {timeout:.0f} s",
        )
        time.sleep(0.2)
    return (
        f"sealed     {sum(ends.values()):,} offsets of {len(ends)} partitions in the bucket "
        f"as Parquet {time.monotonic() - t0:.1f} s after the producer stopped "
        f"(segment.ms {SEGMENT_MS})"
    )


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
