"""Compaction benchmark: sparklog's compaction job against Spark doing the same by hand.

Data: ``--records`` records (default 5,000,000) over ``--keys`` keys (default 100,000),
keys drawn uniformly at random, spread over ``--partitions`` partitions (key i lives in
partition i mod P, as a key-hash partitioner would place it), key 10 B, value
``--value-bytes`` B (default 100, drawn from a pool of 65,536 random values, so that zstd
finds no long repeats). Written through ``PartitionLog`` and sealed into Parquet segments of
at most ``--segment-bytes``; every record is older than min.compaction.lag.ms.

Measured, in one SparkSession (local[2] unless ``--master``), after a small warm-up run:

* ``spark``     the baseline: ``spark.read.parquet`` of the same sealed segment files, the
                last offset per key (groupBy + max), a join back to the rows, and
                ``write.parquet`` (zstd, as sealed segments are) of what survives.
* ``sparklog``  ``sparklog.compaction.compactor.compact`` on the topic: planning, finding
                the last offset per key, rewriting the segments, committing the manifests.
                Its two phases are timed from its progress lines.

Records/s = input records / wall seconds. The ratio sparklog/spark has a target of >= 0.8.
Both results are checked: as many records as keys survive. Exit status 0 either way.

    .venv/bin/python bench/compaction.py --quick    # 500,000 records, 20,000 keys
    .venv/bin/python bench/compaction.py            # 5,000,000 records, 100,000 keys
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from _spark import spark_session

from sparklog.compaction.compactor import compact
from sparklog.storage import Storage, names
from sparklog.storage.manifest import ManifestStore
from sparklog.storage.records import TIMESTAMP_TYPE

TOPIC = "bench"
BATCH = 50_000
POOL = 65_536


@dataclass(frozen=True)
class Data:
    root: str
    files: list[str]
    records: int
    keys: int
    bytes: int
    segments: int


def _batch(rng_seed: int, n: int, keys: int, partitions: int, p: int, pool: pa.Array,
           ts: int) -> pa.RecordBatch:  # fmt: skip
    """``n`` records of partition ``p``: keys k with k mod partitions == p."""
    per = (keys - p + partitions - 1) // partitions
    draw = pc.random(n, initializer=rng_seed)
    idx = pc.cast(pc.floor(pc.multiply(draw, per)), pa.int64())
    key_ids = pc.add(pc.multiply(idx, partitions), p)
    key_str = pc.utf8_lpad(pc.cast(key_ids, pa.string()), 6, "0")
    k = pc.cast(pc.binary_join_element_wise("key-", key_str, ""), pa.binary())
    v_idx = pc.cast(pc.floor(pc.multiply(pc.random(n, initializer=rng_seed + 1), POOL)), pa.int64())
    v = pc.take(pool, v_idx)
    t = pa.array([ts] * n, pa.int64()).cast(TIMESTAMP_TYPE)
    return pa.RecordBatch.from_arrays([k, v, t], names=["key", "value", "timestamp"])


def generate(root: str, records: int, keys: int, partitions: int, value_bytes: int,
             segment_bytes: int) -> Data:  # fmt: skip
    storage = Storage(root)
    storage.topics.create(
        TOPIC,
        partitions,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment_bytes),
            "max.message.bytes": str(64 << 20),
        },
    )
    pool = pa.array([os.urandom(value_bytes) for _ in range(POOL)], pa.binary())
    ts = int(time.time() * 1000) - 3600_000
    per_partition = records // partitions
    files = []
    for p in range(partitions):
        log = storage.open_log(TOPIC, p)
        for i, start in enumerate(range(0, per_partition, BATCH)):
            n = min(BATCH, per_partition - start)
            log.append(_batch(p * 100_003 + i * 2, n, keys, partitions, p, pool, ts), durable=False)
        log.roll()
        log.wait_sealed()
        files += [os.path.join(log.path, s.name) for s in log.manifest.segments if s.sealed]
        log.close()
    size = sum(os.path.getsize(f) for f in files)
    return Data(root, files, per_partition * partitions, keys, size, len(files))


def _distinct_keys(root: str, partitions: int) -> int:
    storage = Storage(root)
    seen = 0
    for p in range(partitions):
        view = storage.reader(TOPIC, p).view()
        seen += sum(b.num_rows for b in view.batches(view.log_start_offset))
    return seen


def run_spark(spark: object, data: Data, out_dir: str) -> float:
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    df = spark.read.parquet(*data.files)  # type: ignore[attr-defined]
    last = df.groupBy("key").agg(F.max("offset").alias("offset"))
    kept = df.join(last, ["key", "offset"])
    kept.write.mode("overwrite").option("compression", "zstd").parquet(out_dir)
    seconds = time.perf_counter() - t0
    written = spark.read.parquet(out_dir).count()  # type: ignore[attr-defined]
    if written != data.keys:
        print(f"WARNING: the Spark baseline kept {written} records, expected {data.keys}")
    return seconds


def run_sparklog(spark: object, data: Data, partitions: int) -> tuple[float, float]:
    """(total seconds, seconds until the rewrite phase started)."""
    marks: dict[str, float] = {}

    def progress(line: str) -> None:
        if "rewriting" in line and "rewrite" not in marks:
            marks["rewrite"] = time.perf_counter()

    t0 = time.perf_counter()
    report = compact(spark, data.root, [TOPIC], progress=progress)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    done = [o for o in report.outcomes if o.status == "compacted"]
    if len(done) != partitions:
        print(f"WARNING: {len(done)} of {partitions} partitions compacted")
    kept = _distinct_keys(data.root, partitions)
    if kept != data.keys:
        print(f"WARNING: sparklog kept {kept} records, expected {data.keys}")
    return seconds, marks.get("rewrite", t0 + seconds) - t0


def _warm_up(spark: object, tmp: str) -> None:
    small = generate(os.path.join(tmp, "warm"), 20_000, 1_000, 2, 50, 1 << 20)
    run_spark(spark, small, os.path.join(tmp, "warm-out"))
    run_sparklog(spark, small, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="500,000 records, 20,000 keys")
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--segment-bytes", type=int, default=64 << 20)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    args = parser.parse_args()
    if args.quick:
        args.records, args.keys, args.segment_bytes = 500_000, 20_000, 8 << 20
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    tmp = args.dir or tempfile.mkdtemp(prefix="sparklog-bench-compaction-")
    try:
        t0 = time.perf_counter()
        data = generate(os.path.join(tmp, "data"), args.records, args.keys, args.partitions,
                        args.value_bytes, args.segment_bytes)  # fmt: skip
        print(f"generated {data.records:,} records over {data.keys:,} keys in "
              f"{args.partitions} partitions: {data.segments} sealed segments, "
              f"{data.bytes / 1e6:,.1f} MB ({time.perf_counter() - t0:.1f} s)")  # fmt: skip

        spark = spark_session(
            "sparklog-bench-compaction",
            args.master,
            spark_sql_shuffle_partitions=str(max(4, args.partitions)),
        )
        _warm_up(spark, tmp)
        spark_s = run_spark(spark, data, os.path.join(tmp, "spark-out"))
        ours_s, find_s = run_sparklog(spark, data, args.partitions)
        spark.stop()
        after = _segments_after(data.root, args.partitions)
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    ours_rate, spark_rate = data.records / ours_s, data.records / spark_s
    print()
    print(f"compaction of {data.records:,} records over {data.keys:,} keys "
          f"({args.partitions} partitions, {data.segments} segments -> {after}, "
          f"{data.bytes / 1e6:,.1f} MB), {args.master}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")  # fmt: skip
    print(f"{'':36}{'seconds':>10}{'records/s':>14}")
    print(f"{'sparklog compaction job':36}{ours_s:>10.1f}{ours_rate:>14,.0f}")
    print(f"{'  find last offset per key':36}{find_s:>10.1f}")
    print(f"{'  rewrite segments + commit':36}{ours_s - find_s:>10.1f}")
    print(f"{'spark read/last-per-key/write':36}{spark_s:>10.1f}{spark_rate:>14,.0f}")
    print(f"{'ratio sparklog / spark':36}{ours_rate / spark_rate:>10.2f}   (target >= 0.8)")
    return 0


def _segments_after(root: str, partitions: int) -> int:
    storage = Storage(root)
    total = 0
    for p in range(partitions):
        m = ManifestStore(storage.fs, names.partition_dir(storage.root, TOPIC, p)).latest()
        total += sum(1 for s in m.segments if s.sealed) if m else 0
    return total


if __name__ == "__main__":
    sys.exit(main())
