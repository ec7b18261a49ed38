"""The export job's command line: ``./spark-submit.sh export ...`` (``jobs/export.py`` only
calls ``main``)::

./spark-submit.sh export --topic T --format parquet|delta|avro|json --out PATH
    [--data-dir DIR] [--starting-offsets earliest|latest|JSON | --starting-timestamp MS]
    [--ending-offsets latest|JSON] [--incremental --checkpoint PATH]
    [--decode avro --schema FILE | --decode json --schema DDL
     | --decode registry [--subject S] [--schema-version N] [--schema-registry-url URL
                         [--schema-registry-ca-file PEM]]]
    [--upsert] [--reader native|python]

``parse`` turns the arguments into an ``ExportOptions``, which checks that they go
together (``sparklog.export.options``; errors name the option); argparse itself refuses a
malformed argument. ``--decode avro --schema FILE`` is read here: the options hold the
schema's text. ``main`` runs the export (``sparklog.export.job``), which prints a line per
partition as it is planned, progress of the write's Spark stages, a line per micro-batch
of an incremental run, then the summary printed here. Exit status (``sparklog.cli.exits``):
``OK`` done; ``FAILED`` failed (one line says why; ``FAILED (data loss)`` for offsets
retention removed); ``USAGE`` bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sparklog.cli.exits import ExitCode
from sparklog.errors import (
    ExportUsageError,
    NoStorageError,
    OffsetOutOfRangeError,
    OptionError,
    SparkLogError,
    UnknownTopicError,
)
from sparklog.export.options import FORMATS, ExportOptions
from sparklog.spark_jobs import describe_error


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="export", description="Export a sparklog topic.")
    p.add_argument("--topic", required=True)
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, help="output directory or table path")
    p.add_argument("--data-dir", default="data", help="the storage root (default ./data)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--starting-offsets", metavar="earliest|latest|JSON")
    start.add_argument("--starting-timestamp", type=int, metavar="MS")
    p.add_argument("--ending-offsets", metavar="latest|JSON")
    p.add_argument(
        "--incremental",
        action="store_true",
        help="export what is new since the last run (needs --checkpoint)",
    )
    p.add_argument("--checkpoint", help="where an incremental export keeps its progress")
    p.add_argument(
        "--max-records-per-batch",
        type=int,
        metavar="N",
        help="--incremental: at most N records a micro-batch",
    )
    p.add_argument("--decode", choices=("avro", "json", "registry"), help="decode the value column")
    p.add_argument("--schema", help="--decode avro: an .avsc file; --decode json: a DDL string")
    p.add_argument("--subject", help="--decode registry: the subject (default <topic>-value)")
    p.add_argument(
        "--schema-version",
        type=int,
        metavar="N",
        help="--decode registry: the reader schema's version (default: latest)",
    )
    p.add_argument(
        "--schema-registry-url",
        metavar="URL",
        help="--decode registry: the registry (default: the storage root's _schemas topic)",
    )
    p.add_argument(
        "--schema-registry-ca-file",
        metavar="PEM",
        help="--decode registry: the CA bundle an https registry is verified "
        "with (default: the system's)",
    )
    p.add_argument(
        "--upsert",
        action="store_true",
        help="delta only: one row per key, tombstones delete it",
    )
    p.add_argument(
        "--include-headers",
        action="store_true",
        help="export the record headers too (column headers: "
        "array<struct<key string, value binary>>)",
    )
    p.add_argument(
        "--reader",
        choices=("native", "python"),
        default="native",
        help="sealed segments through Spark's Parquet reader (default) or format('sparklog')",
    )
    return p


def parse(argv: Sequence[str] | None = None) -> ExportOptions:
    """Parse and validate; argparse exits with status 2 on malformed arguments, and
    ``ExportUsageError`` names the option for contradictions."""
    a = parser().parse_args(argv)
    schema, unreadable = a.schema, None
    if a.decode == "avro" and a.schema is not None:
        try:
            with open(a.schema, encoding="utf-8") as f:
                schema = f.read()
        except OSError as e:
            unreadable = e
    opts = ExportOptions(  # checks that the options go together, before the file's error
        topic=a.topic,
        format=a.format,
        out=a.out if "://" in a.out else os.path.abspath(a.out),
        data_dir=a.data_dir,
        starting_offsets=a.starting_offsets,
        starting_timestamp=a.starting_timestamp,
        ending_offsets=a.ending_offsets,
        incremental=a.incremental,
        checkpoint=a.checkpoint,
        decode=a.decode,
        schema=schema,
        upsert=a.upsert,
        reader=a.reader,
        max_records_per_batch=a.max_records_per_batch,
        include_headers=a.include_headers,
        subject=a.subject,
        schema_version=a.schema_version,
        registry_url=a.schema_registry_url,
        registry_ca_file=a.schema_registry_ca_file,
    )
    if unreadable is not None:
        raise ExportUsageError(f"--schema: cannot read the Avro schema file: {unreadable}")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = parse(argv)
    except ExportUsageError as e:
        print(f"export: error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except SystemExit as e:  # argparse: --help (0), or a malformed argument (2, printed)
        return int(e.code or 0)
    from pyspark.sql import SparkSession

    from sparklog.export.job import export, say

    spark = SparkSession.builder.appName(f"sparklog-export-{opts.topic}").getOrCreate()
    try:
        result = export(spark, opts)
    except (ExportUsageError, OptionError, NoStorageError, UnknownTopicError) as e:
        print(f"export: error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except (SparkLogError, ValueError) as e:
        kind = "data loss" if isinstance(e, OffsetOutOfRangeError) else type(e).__name__
        print(f"export: FAILED ({kind}): {e}", file=sys.stderr)
        return ExitCode.FAILED
    except Exception as e:
        print(f"export: FAILED: {describe_error(e)}", file=sys.stderr)
        return ExitCode.FAILED
    finally:
        spark.stop()
    say(result.summary(opts))
    return ExitCode.OK
