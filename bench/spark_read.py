"""Spark read benchmark: ``readStream.format("sparklog")`` against Spark's own Parquet file
stream source over the same data, both with ``Trigger.AvailableNow`` into the ``noop`` sink.

Data: ``--records`` records (16-byte keys, 100-byte random values) in a 4-partition topic,
written straight to storage and sealed (segments of ``--segment-mb``), so the log is sealed
zstd Parquet, as a topic older than its active segment is. Baseline: the same sealed
segment files hard-linked into one directory and read with
``spark.readStream.format("parquet")`` - the same bytes, decoded by Spark's vectorised
reader in the JVM. Each run is a fresh query (new checkpoint) timed from ``start()`` to the
end of ``awaitTermination()``; runs of the two alternate, medians of ``--repeats``.

A third kind shows what any Python source costs: a bare in-memory
``DataSourceStreamReader`` whose ``read()`` yields prebuilt Arrow batches of the same seven
columns and sizes (no storage, no decoding) - the ceiling of Spark's Python data source
path on this machine. sparklog also runs with ``kafka.check.crcs=false`` (Spark's Parquet
reader verifies no page CRCs by default).

The peer (``--no-kafka`` skips it): Apache Kafka 4.3.1 (``bench/_kafka.py``, single-node
KRaft) holding the same number of records (16-byte keys, 100-byte random values) in a
4-partition topic, produced by confluent-kafka (lz4 batches, as a producer would send them),
read by Spark's own Kafka source ``readStream.format("kafka")`` with ``minPartitions`` set
to sparklog's task count - what a Spark user on Kafka runs today. The goal is sparklog >=
2.0x this.

One SparkSession (``local[2]``, the machine's two cores) serves every run; a warm-up run of
each comes first so Python workers and JIT are warm for all. Before each run the script
waits up to ``--wait-quiet`` seconds for the CPUs to be idle.

    .venv/bin/python bench/spark_read.py --quick    # 500k records, 1 repeat
    .venv/bin/python bench/spark_read.py            # 5M records, median of 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from _broker import cleanup_on_signals, temp_dir
from _machine import load_average, wait_for_quiet
from _spark import spark_session
from _tables import fmt_table
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sparklog.datasource.scan import KAFKA_SCHEMA, OffsetRange, read_range
from sparklog.storage import Storage
from sparklog.storage.records import TIMESTAMP_TYPE

TOPIC = "bench"
PARTITIONS = 4


class _Slice(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class BareStreamReader(DataSourceStreamReader):
    """``rows`` records at offset 0 (then nothing more), read as prebuilt Arrow batches."""

    def __init__(self, rows: int, splits: int) -> None:
        self.rows, self.splits = rows, splits

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"n": self.rows}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Slice]:
        n = end["n"] - start["n"]
        return [_Slice(n // self.splits + (i < n % self.splits)) for i in range(self.splits)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Slice)
        m = 131_072  # a sealed row group
        batch = pa.record_batch(
            {
                "key": pa.array([b"key-%011d" % i for i in range(m)], pa.binary()),
                "value": pa.array([os.urandom(100) for _ in range(m)], pa.binary()),
                "topic": pa.array([TOPIC] * m, pa.string()),
                "partition": pa.array([0] * m, pa.int32()),
                "offset": pa.array(range(m), pa.int64()),
                "timestamp": pa.array(range(m), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array([0] * m, pa.int32()),
            }
        )
        for start in range(0, partition.rows, m):
            yield batch.slice(0, min(m, partition.rows - start))

    def commit(self, end: dict[str, int]) -> None:
        return None


class BareSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_bare"

    def schema(self) -> str:
        return KAFKA_SCHEMA

    def streamReader(self, schema: Any) -> BareStreamReader:
        return BareStreamReader(int(self.options["rows"]), int(self.options["splits"]))


def write_topic(root: str, records: int, segment_mb: int) -> list[str]:
    """The topic in storage, every segment sealed; returns the sealed Parquet paths."""
    storage = Storage(root)
    configs = {"segment.bytes": str(segment_mb * 1024 * 1024), "max.message.bytes": str(2**30)}
    storage.topics.create(TOPIC, PARTITIONS, configs)
    per = records // PARTITIONS
    now = int(time.time() * 1000) - records
    files = []
    for p in range(PARTITIONS):
        log = storage.open_log(TOPIC, p)
        for start in range(0, per, 50_000):
            n = min(50_000, per - start)
            keys = pa.array([b"key-%011d" % (start + i) for i in range(n)], pa.binary())
            values = pa.array([os.urandom(100) for _ in range(n)], pa.binary())
            ts = pa.array(range(now + start, now + start + n), pa.int64()).cast(TIMESTAMP_TYPE)
            log.append(pa.record_batch([keys, values, ts], names=["key", "value", "timestamp"]),
                       durable=False)  # fmt: skip
        log.roll()
        log.wait_sealed()
        path = log.path
        files += [os.path.join(path, s.name) for s in log.manifest.segments if s.sealed]
        log.close()
    return files


def read_alone(root: str, records: int, split: int, check_crcs: bool) -> float:
    """Seconds for sparklog's own ``read()`` work over every range, in this process, without
    Spark (pyarrow may use both cores, as the query's tasks do): what our code costs per row,
    apart from Spark's Python data source path."""
    per = records // PARTITIONS
    t0 = time.perf_counter()
    rows = 0
    for p in range(PARTITIONS):
        for lo in range(0, per, split):
            rng = OffsetRange(root, TOPIC, p, lo, min(lo + split, per), False, True, check_crcs)
            rows += sum(b.num_rows for b in read_range(rng))
    assert rows == per * PARTITIONS, rows
    return time.perf_counter() - t0


def fill_kafka(bootstrap: str, records: int) -> None:
    """``records`` records like ``write_topic``'s into Kafka's 4-partition topic ``TOPIC``."""
    from confluent_kafka import Producer
    from produce import create_topic

    create_topic(bootstrap, TOPIC, PARTITIONS, {})
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50,
                  "batch.size": 1_000_000, "compression.type": "lz4",
                  "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    per = records // PARTITIONS
    for part in range(PARTITIONS):
        for i in range(per):
            while True:
                try:
                    p.produce(TOPIC, key=b"key-%011d" % i, value=os.urandom(100), partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
    if p.flush(120):
        raise RuntimeError("kafka: records still unacknowledged after 120 s")


def run_query(spark: Any, reader: Any, checkpoint: str) -> float:
    t0 = time.perf_counter()
    q = (
        reader.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    return elapsed if rows else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--split", type=int, default=1_000_000, help="maxRecordsPerPartition")
    ap.add_argument("--wait-quiet", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="500k records, 1 repeat")
    ap.add_argument("--no-kafka", action="store_true", help="skip the Apache Kafka peer")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 500_000, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cleanup_on_signals()

    import sparklog.spark

    with temp_dir("sparklog-bench-read") as tmp:
        root = os.path.join(tmp, "data")
        t0 = time.perf_counter()
        files = write_topic(root, args.records, args.segment_mb)
        print(f"wrote {args.records:,} records in {len(files)} sealed segments "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)  # fmt: skip
        parquet_dir = os.path.join(tmp, "parquet")
        os.makedirs(parquet_dir)
        for i, f in enumerate(files):
            os.link(f, os.path.join(parquet_dir, f"part-{i:05d}.parquet"))
        spark = spark_session("bench-spark-read")
        sparklog.spark.register(spark)
        schema = spark.read.parquet(parquet_dir).schema

        spark.dataSource.register(BareSource)
        splits = -(-args.records // args.split) + PARTITIONS  # as many tasks as sparklog's

        def ours(check_crcs: str) -> Any:
            return lambda: (
                spark.readStream.format("sparklog")
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .option("maxRecordsPerPartition", str(args.split))
                .option("kafka.check.crcs", check_crcs)
                .load(root)
            )

        def bare() -> Any:
            return (
                spark.readStream.format("bench_bare").option("rows", str(args.records))
                .option("splits", str(splits)).load()
            )  # fmt: skip

        def native() -> Any:
            return spark.readStream.format("parquet").schema(schema).load(parquet_dir)

        kinds = {"sparklog": ours("true"), "sparklog, check.crcs=false": ours("false"),
                 "bare python source": bare, "parquet": native}  # fmt: skip
        kafka = None
        if not args.no_kafka:
            from _kafka import KafkaServer

            kafka = KafkaServer(os.path.join(tmp, "kafka")).start()
            t0 = time.perf_counter()
            fill_kafka(kafka.bootstrap, args.records)
            print(f"produced {args.records:,} records into Apache Kafka 4.3.1 "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)  # fmt: skip
            bootstrap = kafka.bootstrap

            def kafka_source() -> Any:
                return (
                    spark.readStream.format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                    .option("minPartitions", str(splits - PARTITIONS)).load()
                )  # fmt: skip

            kinds["Kafka + Spark's Kafka source"] = kafka_source
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for make in kinds.values():  # warm-up
            run_query(spark, make(), os.path.join(tmp, f"ck-{uuid.uuid4().hex}"))
        for _ in range(args.repeats):
            for k, make in kinds.items():
                quiet = wait_for_quiet(args.wait_quiet)
                t = run_query(spark, make(), os.path.join(tmp, f"ck-{uuid.uuid4().hex}"))
                times[k].append(t)
                print(f"  {k:28s} {args.records / t:12,.0f} rows/s  ({t:.2f}s; {quiet})",
                      flush=True)  # fmt: skip
        alone = [read_alone(root, args.records, args.split, True) for _ in range(args.repeats)]
        spark.stop()
        if kafka is not None:
            kafka.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: args.records / t for k, t in med.items()}
    print()
    print(f"{platform.node()}  {os.cpu_count()} CPUs  load {load_average()}  "
          f"records={args.records:,}  repeats={args.repeats}  split={args.split:,}")  # fmt: skip
    print(fmt_table(
        ["reader (AvailableNow -> noop)", "rows/s", "seconds", "x parquet"],
        [[k, f"{rate[k]:,.0f}", f"{med[k]:.2f}", f"{rate[k] / rate['parquet']:.3f}"]
         for k in kinds],
    ))  # fmt: skip
    ours, bare = rate["sparklog"], rate["bare python source"]
    alone_rate = args.records / statistics.median(alone)
    print(
        f"\nsparklog read() alone, in-process, no Spark: {alone_rate:,.0f} rows/s "
        f"({1e6 / alone_rate:.3f} us/row of the {1e6 / ours:.3f} us/row the query takes)"
    )
    print(f"ratio sparklog / parquet = {ours / rate['parquet']:.3f} (target >= 1.0); "
          f"sparklog / bare python source = {ours / bare:.3f}")  # fmt: skip
    if "Kafka + Spark's Kafka source" in rate:
        peer = rate["Kafka + Spark's Kafka source"]
        print(f"ratio sparklog / Kafka + Spark's Kafka source = {ours / peer:.3f} "
              "(goal >= 2.0)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
