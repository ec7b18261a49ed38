"""Produce-to-visible latency of ``readStream.format("sparklog")``, against Apache Kafka
with Spark's Kafka source and a bare Python streaming source, in the same run.

sparklog: a confluent-kafka producer (acks=all; librdkafka's defaults, linger.ms=5) sends
``--rate`` records per second for ``--seconds`` to a broker process on loopback; each
record's timestamp is its produce time (CreateTime). A streaming query over the topic with a
0-second processing-time trigger collects each micro-batch in ``foreachBatch`` and notes the
time it has the rows; a record's latency = that time - its timestamp.

Baseline: the same query shape over a bare Python ``DataSourceStreamReader`` whose records
"appear" at the same rate by the clock alone (offset = elapsed seconds x rate, timestamp =
the instant the offset became available, ``read()`` builds the rows in memory). It has no
broker, no fsync, no storage: its latency is what Spark's micro-batch loop and the Python
data source machinery cost, the floor any Python source stands on.

The peer (``--no-kafka`` skips it): the same producer, rate and query against Apache Kafka
4.3.1 (``bench/_kafka.py``: single-node KRaft, its default flush policy) read with Spark's
own Kafka source, ``readStream.format("kafka")`` (the jars ``make setup`` fetches) - what a
user of Kafka and Spark runs today.

The first ``--warmup`` seconds of each run are not counted: a streaming query runs for
hours, and for its first two minutes or so the JVM is still JIT-compiling Spark's planner
and micro-batch loop (C2 compiler threads take most of a core at 30 s, ~10 % at 120 s on
2 cores), which slows every micro-batch. Reported: p50, p90, p99, max, and sparklog's
p50/p99 as a ratio of the baseline's.

Both queries checkpoint through the local checkpoint file manager that
``conf/spark-defaults.conf`` sets (``sparklog.spark.LOCAL_CHECKPOINT_FILE_MANAGER``);
``--spark-default-checkpoints`` runs them with Spark's default manager instead, which
spawns ``readlink`` processes on every checkpoint rename (see docs/benchmarks.md).

    .venv/bin/python bench/latency.py --quick      # 15 s per run after 30 s of warm-up
    .venv/bin/python bench/latency.py              # 60 s per run after 120 s of warm-up
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _machine import load_average, wait_for_quiet
from _spark import spark_session
from _tables import fmt_table, percentile
from confluent_kafka import Producer
from produce import create_topic
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

TOPIC = "latency"


class _Range(InputPartition):
    def __init__(self, start: int, end: int, t0: float, rate: float) -> None:
        self.start, self.end, self.t0, self.rate = start, end, t0, rate


class ClockStreamReader(DataSourceStreamReader):
    """Offset n becomes available at t0 + n / rate; its timestamp is that instant."""

    def __init__(self, t0: float, rate: float) -> None:
        self.t0, self.rate = t0, rate

    def initialOffset(self) -> dict[str, int]:
        return {"n": self._now()}

    def _now(self) -> int:
        return max(int((time.time() - self.t0) * self.rate), 0)

    def latestOffset(self) -> dict[str, int]:
        return {"n": self._now()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Range]:
        return [_Range(start["n"], end["n"], self.t0, self.rate)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        n = range(partition.start, partition.end)
        ts = [int((partition.t0 + i / partition.rate) * 1_000_000) for i in n]
        yield pa.record_batch(
            [pa.array(list(n), pa.int64()), pa.array(ts, pa.timestamp("us", tz="UTC"))],
            names=["offset", "timestamp"],
        )

    def commit(self, end: dict[str, int]) -> None:
        return None


class ClockSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_clock"

    def schema(self) -> str:
        return "offset long, timestamp timestamp"

    def streamReader(self, schema: Any) -> ClockStreamReader:
        return ClockStreamReader(float(self.options["t0"]), float(self.options["rate"]))


def run_query(spark: Any, reader: Any, checkpoint: str, seconds: float, warmup: float,
              producer: Any, warm: Callable[[], None]) -> list[float]:  # fmt: skip
    """Latencies in ms of the records timestamped after the warm-up.

    The query first sees some rows (``warm()`` makes some appear) - its first data batch
    starts the Python workers and compiles, seconds that are Spark's start-up, not latency;
    then the steady load starts (``producer``, or the clock source's own records) and the
    records of its first ``warmup`` seconds are not counted either.
    """
    latencies: list[float] = []
    cutoff = [float("inf")]
    saw_rows, done = threading.Event(), threading.Event()

    def on_batch(df: Any, batch_id: int) -> None:
        if done.is_set():
            return  # measuring is over: let the batch end so stop() interrupts nothing
        rows = df.select("timestamp").collect()
        now = time.time()
        if rows:
            saw_rows.set()
        latencies.extend(
            (now - r.timestamp.timestamp()) * 1000
            for r in rows
            if r.timestamp.timestamp() > cutoff[0]
        )

    q = (
        reader.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    warm()
    if not saw_rows.wait(300):
        raise RuntimeError("the query saw no rows in 300 s")
    cutoff[0] = time.time() + warmup
    if producer is not None:
        producer.start()
        producer.join()
        time.sleep(2)  # the last records reach the query
    else:
        time.sleep(seconds + warmup)
    done.set()
    time.sleep(1)  # the batch in flight, if any, ends
    q.stop()
    steps: dict[str, list[int]] = {}
    for p in q.recentProgress:
        if p["numInputRows"]:
            for k, v in p["durationMs"].items():
                steps.setdefault(k, []).append(v)
    medians = ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(steps.items()))
    print(f"  micro-batch steps, median ms: {medians}", flush=True)
    return latencies


def produce_steadily(bootstrap: str, rate: int, seconds: float, acks: str = "") -> None:
    """``rate`` records a second for ``seconds``; the produce-to-ack latencies (ms) of the
    records are written to the file ``acks`` (JSON), if given."""
    # librdkafka's own defaults (linger.ms=5): with linger.ms=0 and its unbounded pipelining
    # (max.in.flight 1,000,000) the broker's per-request cost queues acks (see benchmarks.md)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    acked: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(time.time() * 1000 - msg.timestamp()[1])

    start = time.time()
    n = 0
    value = b"x" * 100
    while (elapsed := time.time() - start) < seconds:
        due = int(elapsed * rate)
        while n < due:
            p.produce(TOPIC, key=b"k%d" % (n % 1000), value=value, on_delivery=delivered)
            n += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush(30)
    if acks:
        with open(acks, "w") as f:
            json.dump(acked, f)


def broker_run(
    spark: Any, args: argparse.Namespace, tmp: str, bootstrap: str, reader: Any
) -> tuple[list[float], list[float]]:
    """One broker's run: (latencies, producer ack latencies), in ms."""
    print(f"quiet: {wait_for_quiet(args.wait_quiet)}", flush=True)
    # the producer is a process of its own, as an application is: in this process it
    # would share the GIL with the driver's foreachBatch and py4j threads
    acks = os.path.join(tmp, f"acks-{time.monotonic_ns()}.json")
    producer = multiprocessing.get_context("spawn").Process(
        target=produce_steadily, args=(bootstrap, args.rate, args.seconds + args.warmup, acks)
    )

    def warm() -> None:  # a few records, so the first data batch runs now
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            p.produce(TOPIC, value=b"warm-%d" % i)
        p.flush(30)

    checkpoint = os.path.join(tmp, f"ck-{time.monotonic_ns()}")
    lat = run_query(spark, reader, checkpoint, args.seconds, args.warmup, producer, warm)
    with open(acks) as f:
        return lat, json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=500, help="records per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=120.0, help="seconds not counted")
    ap.add_argument(
        "--spark-default-checkpoints",
        action="store_true",
        help="Spark's default checkpoint file manager instead of the local one",
    )
    ap.add_argument("--wait-quiet", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="15 s runs")
    ap.add_argument("--no-kafka", action="store_true", help="skip the Apache Kafka peer")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup = 15.0, 30.0
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cleanup_on_signals()

    import sparklog.spark

    results: dict[str, list[float]] = {}
    with temp_dir("sparklog-bench-latency") as tmp:
        manager = {"spark_sql_streaming_checkpointFileManagerClass": ""}
        spark = spark_session(
            "bench-latency",
            spark_sql_shuffle_partitions="2",
            **(manager if args.spark_default_checkpoints else {}),
        )
        sparklog.spark.register(spark)
        spark.dataSource.register(ClockSource)
        acks: dict[str, list[float]] = {}
        with BrokerProcess(os.path.join(tmp, "data")) as broker:
            create_topic(broker.bootstrap, TOPIC, 1, {})
            reader = (
                spark.readStream.format("sparklog").option("subscribe", TOPIC)
                .option("startingOffsets", "earliest").load(broker.data_dir)
            )  # fmt: skip
            name = 'sparklog, format("sparklog")'
            results[name], acks[name] = broker_run(spark, args, tmp, broker.bootstrap, reader)
        if not args.no_kafka:
            from _kafka import KafkaServer

            with KafkaServer(os.path.join(tmp, "kafka")) as kafka:
                create_topic(kafka.bootstrap, TOPIC, 1, {})
                reader = (
                    spark.readStream.format("kafka")
                    .option("kafka.bootstrap.servers", kafka.bootstrap)
                    .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
                )  # fmt: skip
                name = 'Apache Kafka 4.3.1, format("kafka")'
                results[name], acks[name] = broker_run(spark, args, tmp, kafka.bootstrap, reader)
        print(f"quiet: {wait_for_quiet(args.wait_quiet)}", flush=True)
        reader = (
            spark.readStream.format("bench_clock").option("t0", str(time.time()))
            .option("rate", str(args.rate)).load()
        )  # fmt: skip
        results["bare source"] = run_query(spark, reader, os.path.join(tmp, "ck2"),
                                           args.seconds, args.warmup, None,
                                           lambda: None)  # fmt: skip
        spark.stop()
    print()
    checkpoints = "Spark's default" if args.spark_default_checkpoints else "local"
    print(f"{platform.node()}  {os.cpu_count()} CPUs  load {load_average()}  "
          f"rate={args.rate}/s  seconds={args.seconds:.0f}  warmup={args.warmup:.0f}  "
          f"checkpoint file manager: {checkpoints}")  # fmt: skip
    rows = []
    for name, lat in results.items():
        if not lat:
            raise SystemExit(f"{name}: no records were seen")
        cells = [f"{percentile(lat, q):.0f}" for q in (0.5, 0.9, 0.99)] + [f"{max(lat):.0f}"]
        rows.append([name, f"{len(lat):,}", *cells])
    print(fmt_table(["source", "records", "p50 ms", "p90 ms", "p99 ms", "max ms"], rows))
    print()
    for name, ack_ms in acks.items():
        p50, p99 = percentile(ack_ms, 0.5), percentile(ack_ms, 0.99)
        print(f"producer acks (acks=all) during the {name} run: p50 {p50:.0f} ms, "
              f"p99 {p99:.0f} ms")  # fmt: skip
    names = list(results)
    ours, bare = results[names[0]], results["bare source"]
    print(f"\nsparklog / bare source: p50 {percentile(ours, 0.5) / percentile(bare, 0.5):.2f}, "
          f"p99 {percentile(ours, 0.99) / percentile(bare, 0.99):.2f}  "
          "(targets: p50 <= 200 ms, p99 <= 400 ms)")  # fmt: skip
    if not args.no_kafka:
        peer = results[names[1]]
        r50 = percentile(ours, 0.5) / percentile(peer, 0.5)
        r99 = percentile(ours, 0.99) / percentile(peer, 0.99)
        print(f"sparklog / Kafka + Spark's Kafka source: p50 {r50:.2f}, p99 {r99:.2f}  "
              "(goal: p99 <= 1.0)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
