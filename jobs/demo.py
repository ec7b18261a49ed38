"""spark-submit entry point of the embedded demo (``make demo``):
``./spark-submit.sh demo [--data-dir DIR] [--events N] [--keys K]``, and the cluster demo
``./spark-submit.sh demo --brokers 3 [--kills N]`` (brokers over one directory and etcd).
The demo's directory is removed after a successful run unless ``--keep`` is given.

Logic in ``sparklog.demo``: a broker on loopback, Kafka producers, a streaming query with a
consumer group, compaction, retention, exports, all checked against a model.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

from sparklog import demo


def main() -> int:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument(
        "--data-dir", default="demo-data", help="the demo's directory (default ./demo-data)"
    )
    parser.add_argument("--events", type=int, default=300_000, help="order events to produce")
    parser.add_argument("--keys", type=int, default=20_000, help="distinct orders")
    parser.add_argument(
        "--brokers", type=int, default=0,
        help="run the cluster demo instead: this many brokers over one directory and etcd",
    )  # fmt: skip
    parser.add_argument("--kills", type=int, default=2, help="cluster demo: leaders killed")
    parser.add_argument(
        "--keep", action="store_true",
        help="keep the demo's directory (by default it is removed after a successful run)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.events < 1000 or args.keys < 10:
        parser.error("--events must be >= 1000 and --keys >= 10")
    spark = SparkSession.builder.appName("sparklog-demo").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        if args.brokers:
            report = demo.run_cluster(spark, args.data_dir, brokers=args.brokers,
                                      kills=args.kills, keep=args.keep, say=say)  # fmt: skip
        else:
            report = demo.run(spark, args.data_dir, events=args.events, keys=args.keys,
                              keep=args.keep, say=say)  # fmt: skip
    except Exception as e:  # the job's contract: one clear line and a non-zero exit
        print(f"demo: FAILED: {type(e).__name__}: {e} (its files are in {args.data_dir})",
              file=sys.stderr, flush=True)  # fmt: skip
        return 1
    finally:
        spark.stop()
    print("\nsparklog demo: OK", flush=True)
    for line in report.lines:
        print("  " + line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
