"""Export benchmark: ``sparklog.export`` of a topic to Parquet against Spark's own
``spark.read.parquet(sealed segments) -> write.parquet`` of the same files, in one run.

Data: ``--records`` records (16-byte keys, 100-byte random values) in a 4-partition topic,
written straight to storage and sealed (as ``bench/spark_read.py`` writes them). Measured,
each in a fresh output directory, runs alternating, medians of ``--repeats`` after a
warm-up of each:

- export (native): the export job's one-off Parquet export, whose sealed segments are read
  by Spark's vectorised Parquet reader (``--reader native``, the default);
- export (python): the same through ``format("sparklog")`` (``--reader python``);
- baseline: ``spark.read.parquet(<the sealed segment files>).write.parquet(...)``.

All three write zstd Parquet (``spark.sql.parquet.compression.codec=zstd``) from one
``local[2]`` session; the export writes the Kafka source's 7 columns, the baseline every
stored column (9), as the issue defines it.

    .venv/bin/python bench/export.py --quick    # 500k records, 1 repeat
    .venv/bin/python bench/export.py            # 5M records, median of 3
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable

from _broker import cleanup_on_signals, temp_dir
from _machine import load_average, wait_for_quiet
from _spark import spark_session
from _tables import fmt_table
from spark_read import TOPIC, write_topic


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--wait-quiet", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="500k records, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 500_000, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cleanup_on_signals()

    from sparklog.cli.export import parse
    from sparklog.export.job import export

    with temp_dir("sparklog-bench-export") as tmp:
        root = os.path.join(tmp, "data")
        t0 = time.perf_counter()
        files = write_topic(root, args.records, args.segment_mb)
        print(f"wrote {args.records:,} records in {len(files)} sealed segments "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)  # fmt: skip
        spark = spark_session("bench-export", spark_sql_parquet_compression_codec="zstd")

        def out() -> str:
            return os.path.join(tmp, f"out-{uuid.uuid4().hex}")

        def ours(reader: str) -> Callable[[str], None]:
            def run(path: str) -> None:
                opts = parse(["--topic", TOPIC, "--data-dir", root, "--format", "parquet",
                              "--out", path, "--reader", reader])  # fmt: skip
                result = export(spark, opts, progress=lambda _line: None)
                assert result.rows == args.records, result

            return run

        def baseline(path: str) -> None:
            spark.read.parquet(*files).write.parquet(path)

        kinds = {"export (native)": ours("native"), "export (python)": ours("python"),
                 "baseline": baseline}  # fmt: skip
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for run in kinds.values():  # warm-up
            path = out()
            run(path)
            shutil.rmtree(path)
        for _ in range(args.repeats):
            for k, run in kinds.items():
                quiet = wait_for_quiet(args.wait_quiet)
                path = out()
                t = time.perf_counter()
                run(path)
                t = time.perf_counter() - t
                shutil.rmtree(path)
                times[k].append(t)
                print(f"  {k:16s} {args.records / t:12,.0f} rows/s  ({t:.2f}s; {quiet})",
                      flush=True)  # fmt: skip
        spark.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: args.records / t for k, t in med.items()}
    print()
    print(f"{platform.node()}  {os.cpu_count()} CPUs  load {load_average()}  "
          f"records={args.records:,}  repeats={args.repeats}")  # fmt: skip
    print(fmt_table(
        ["to Parquet", "rows/s", "seconds", "x baseline"],
        [[k, f"{rate[k]:,.0f}", f"{med[k]:.2f}", f"{rate[k] / rate['baseline']:.3f}"]
         for k in kinds],
    ))  # fmt: skip
    print(f"\nratio export / baseline = {rate['export (native)'] / rate['baseline']:.3f} "
          f"(target >= 0.9); native reader / python reader = "
          f"{rate['export (native)'] / rate['export (python)']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
