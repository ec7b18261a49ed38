"""Command lines of the retention and compaction jobs (``jobs/retention.py`` and
``jobs/compaction.py`` only call ``retention_main`` and ``compaction_main``)::

    ./spark-submit.sh [SPARK OPTIONS] retention  [--topic T ...] [--data-dir DIR]
    ./spark-submit.sh [SPARK OPTIONS] compaction [--topic T ...] [--data-dir DIR]

Without ``--topic``, retention covers every topic and compaction every topic whose
``cleanup.policy`` has ``compact``. Both print a line per partition as they go and a last
summary line. Exit status (``sparklog.cli.exits``):

    OK (0)      done: every partition compacted, skipped (not worth it), or retention applied
    FAILED (1)  the message says why; what is visible is the old or the new segment set
    USAGE (2)   bad arguments or unknown topic
    RETRY (3)   compaction only: another compaction job holds the topic, or an input
                segment was swapped out by another writer while the job ran (nothing of
                that partition committed)

Retention starts no SparkSession (it reads no records, ``sparklog.compaction.retention``);
compaction does (``sparklog.compaction.compactor``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sparklog.cli.exits import ExitCode
from sparklog.errors import CompactionRunningError, UnknownTopicError
from sparklog.spark_jobs import describe_error


def _parser(job: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=job, description=__doc__.split("\n")[0])
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="T",
        help="a topic (repeatable; default: every topic the job applies to)",
    )
    parser.add_argument("--data-dir", default="data", help="the storage root (default ./data)")
    return parser


def _say(line: str) -> None:
    print(line, flush=True)


def retention_main(argv: Sequence[str] | None = None) -> int:
    from sparklog.compaction.retention import apply_retention

    args = _parser("retention").parse_args(argv)
    try:
        report = apply_retention(args.data_dir, args.topic or None, progress=_say)
    except (UnknownTopicError, ValueError) as e:
        print(f"retention: error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception as e:
        print(f"retention: FAILED: {describe_error(e)}", file=sys.stderr)
        return ExitCode.FAILED
    deleted = sum(o.segments_deleted for o in report.outcomes)
    held = sum(1 for o in report.outcomes if o.held)
    _say(
        f"retention: done in {report.seconds:.1f} s: {len(report.outcomes)} partitions, "
        f"{deleted} segments deleted"
        + (f"; {held} partitions still hold what a limit wants gone (see above)" if held else "")
    )
    return ExitCode.OK


def compaction_main(argv: Sequence[str] | None = None) -> int:
    args = _parser("compaction").parse_args(argv)
    from pyspark.sql import SparkSession

    from sparklog.compaction.compactor import compact

    spark = SparkSession.builder.appName("sparklog-compaction").getOrCreate()
    try:
        report = compact(spark, args.data_dir, args.topic or None, progress=_say)
    except (UnknownTopicError, ValueError) as e:
        print(f"compaction: error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except CompactionRunningError as e:
        print(f"compaction: try again later: {e}", file=sys.stderr)
        return ExitCode.RETRY
    except Exception as e:
        print(f"compaction: FAILED: {describe_error(e)}", file=sys.stderr)
        return ExitCode.FAILED
    finally:
        spark.stop()
    done = [o for o in report.outcomes if o.status == "compacted"]
    _say(
        f"compaction: done in {report.seconds:.1f} s: {len(report.outcomes)} partitions, "
        f"{len(done)} compacted, {len(report.conflicts)} conflicts"
    )
    if report.conflicts:
        print(
            "compaction: try again later: inputs of "
            + ", ".join(f"{o.topic}-{o.partition}" for o in report.conflicts)
            + " changed while the job ran",
            file=sys.stderr,
        )
        return ExitCode.RETRY
    return ExitCode.OK
