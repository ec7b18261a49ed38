"""``sparklog scheduler``: run retention and compaction on intervals from topic configs.

    sparklog scheduler --data-dir DIR [--spark-args "ARGS"] [--min-interval S]
        [--max-interval S] [--max-jobs N] [--spark-submit PATH]

Runs ``sparklog.compaction.scheduler.Scheduler`` (what it runs when, and why: its module
docstring and docs/compaction.md) until SIGTERM or SIGINT, then exits ``OK``.
"""

from __future__ import annotations

import argparse
from typing import Any

from sparklog.cli.arguments import add_command
from sparklog.cli.exits import ExitCode


def add_parser(sub: Any) -> None:
    """The ``scheduler`` command, on the top-level subparsers ``sub``."""
    sched = add_command(
        sub, "scheduler", "run retention and compaction on intervals from topic configs"
    )
    sched.add_argument("--data-dir", required=True, help="the storage root")
    sched.add_argument("--spark-submit", help="the spark-submit.sh to run (default: this one)")
    sched.add_argument(
        "--spark-args", default="", help='options for spark-submit, e.g. "--master yarn"'
    )
    sched.add_argument(
        "--min-interval",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="the shortest time between two checks of a topic (15)",
    )
    sched.add_argument(
        "--max-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="the longest time between two checks of a topic (300)",
    )
    sched.add_argument(
        "--max-jobs",
        type=int,
        default=2,
        help="compaction jobs (Spark) running at once; retention runs in the scheduler itself",
    )
    sched.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``sparklog scheduler``: run until SIGTERM or SIGINT."""
    import logging
    import signal
    import threading

    from sparklog.compaction.scheduler import Scheduler

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    scheduler = Scheduler(
        args.data_dir,
        spark_submit=args.spark_submit,
        spark_args=args.spark_args,
        min_interval_s=args.min_interval,
        max_interval_s=args.max_interval,
        max_jobs=args.max_jobs,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    scheduler.run(stop)
    return ExitCode.OK
