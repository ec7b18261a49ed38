"""The export job's command line, validated in one place (errors name the option)::

./spark-submit.sh export --topic T --format parquet|delta|avro|json --out PATH
    [--data-dir DIR] [--starting-offsets earliest|latest|JSON | --starting-timestamp MS]
    [--ending-offsets latest|JSON] [--incremental --checkpoint PATH]
    [--decode avro --schema FILE | --decode json --schema DDL
     | --decode registry [--subject S] [--schema-version N] [--schema-registry-url URL
                         [--schema-registry-ca-file PEM]]]
    [--upsert] [--reader native|python]

``--decode registry``: values framed by a schema registry (Confluent's wire format, as
confluent-kafka's serializers and the sparklog sink write them) decoded with the schemas
of ``--subject`` (default ``<topic>-value``), version ``--schema-version`` (default: the
latest when the export starts) as the reader schema, from the registry at
``--schema-registry-url`` or, by default, the storage root's own ``_schemas`` topic; an
https registry is verified with ``--schema-registry-ca-file`` (default: the system's CAs).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

from sparklog.errors import ExportUsageError
from sparklog.storage import names

FORMATS = ("parquet", "delta", "avro", "json")


@dataclass(frozen=True)
class ExportOptions:
    topic: str
    format: str
    out: str
    data_dir: str
    starting_offsets: str | None = None
    starting_timestamp: int | None = None
    ending_offsets: str | None = None
    incremental: bool = False
    checkpoint: str | None = None
    decode: str | None = None
    schema: str | None = None  # avro: the .avsc text; json: a DDL string
    upsert: bool = False
    reader: str = "native"
    max_records_per_batch: int | None = None
    include_headers: bool = False
    #: ``--decode registry``: the reader schema's subject (None: ``<topic>-value``), its
    #: version (None: the latest), and the registry (None: the storage root's ``_schemas``)
    subject: str | None = None
    schema_version: int | None = None
    registry_url: str | None = None
    registry_ca_file: str | None = None

    def source_options(self) -> dict[str, str]:
        """The ``format("sparklog")`` options these arguments mean."""
        opts = {"subscribe": self.topic, "startingOffsets": self.starting_offsets or "earliest"}
        if self.starting_timestamp is not None:
            del opts["startingOffsets"]
            opts["startingTimestamp"] = str(self.starting_timestamp)
        if self.ending_offsets is not None and not self.incremental:
            opts["endingOffsets"] = self.ending_offsets
        if self.max_records_per_batch is not None and self.incremental:
            opts["maxOffsetsPerTrigger"] = str(self.max_records_per_batch)
        if self.include_headers or self.decode == "registry":  # ids may be in headers
            opts["includeHeaders"] = "true"
        return opts


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
    p.add_argument("--incremental", action="store_true",
                   help="export what is new since the last run (needs --checkpoint)")  # fmt: skip
    p.add_argument("--checkpoint", help="where an incremental export keeps its progress")
    p.add_argument("--max-records-per-batch", type=int, metavar="N",
                   help="--incremental: at most N records a micro-batch")  # fmt: skip
    p.add_argument("--decode", choices=("avro", "json", "registry"),
                   help="decode the value column")  # fmt: skip
    p.add_argument("--schema", help="--decode avro: an .avsc file; --decode json: a DDL string")
    p.add_argument("--subject", help="--decode registry: the subject (default <topic>-value)")
    p.add_argument(
        "--schema-version",
        type=int,
        metavar="N",
        help="--decode registry: the reader schema's version (default: latest)",
    )
    p.add_argument("--schema-registry-url", metavar="URL",
                   help="--decode registry: the registry (default: the storage root's "
                        "_schemas topic)")  # fmt: skip
    p.add_argument("--schema-registry-ca-file", metavar="PEM",
                   help="--decode registry: the CA bundle an https registry is verified "
                        "with (default: the system's)")  # fmt: skip
    p.add_argument("--upsert", action="store_true",
                   help="delta only: one row per key, tombstones delete it")  # fmt: skip
    p.add_argument("--include-headers", action="store_true",
                   help="export the record headers too (column headers: "
                        "array<struct<key string, value binary>>)")  # fmt: skip
    p.add_argument("--reader", choices=("native", "python"), default="native",
                   help="sealed segments through Spark's Parquet reader (default) or "
                        "format('sparklog')")  # fmt: skip
    return p


def parse(argv: Sequence[str] | None = None) -> ExportOptions:
    """Parse and validate; argparse exits with status 2 on malformed arguments, and
    ``ExportUsageError`` names the option for contradictions."""
    a = parser().parse_args(argv)
    try:
        names.validate_topic_name(a.topic)
    except ValueError as e:
        raise ExportUsageError(f"--topic: {e}") from None
    if a.incremental and not a.checkpoint:
        raise ExportUsageError("--incremental needs --checkpoint PATH (where progress is kept)")
    if a.checkpoint and not a.incremental:
        raise ExportUsageError("--checkpoint is only for --incremental exports")
    if a.incremental and a.ending_offsets:
        raise ExportUsageError("--ending-offsets contradicts --incremental (it has no end)")
    if a.max_records_per_batch is not None and (not a.incremental or a.max_records_per_batch < 1):
        raise ExportUsageError("--max-records-per-batch needs --incremental and N >= 1")
    if a.decode == "registry":
        if a.schema is not None:
            raise ExportUsageError("--decode registry takes its schemas from the registry, not "
                                   "--schema")  # fmt: skip
        if a.schema_version is not None and a.schema_version < 1:
            raise ExportUsageError("--schema-version must be a version >= 1")
        if a.schema_registry_ca_file is not None:
            url = a.schema_registry_url or ""
            if not url.lower().startswith("https://"):
                raise ExportUsageError("--schema-registry-ca-file needs an https:// "
                                       "--schema-registry-url")  # fmt: skip
            if not os.path.isfile(a.schema_registry_ca_file):
                raise ExportUsageError(f"--schema-registry-ca-file: no such file "
                                       f"{a.schema_registry_ca_file!r}")  # fmt: skip
    else:
        if (a.decode is None) != (a.schema is None):
            raise ExportUsageError("--decode and --schema go together")
        for flag in ("subject", "schema_version", "schema_registry_url", "schema_registry_ca_file"):
            if getattr(a, flag) is not None:
                name = "--" + flag.replace("_", "-")
                raise ExportUsageError(f"{name} is for --decode registry")
    if a.upsert and a.format != "delta":
        raise ExportUsageError(
            "--upsert needs --format delta (a table to merge into; files cannot be updated)"
        )
    schema = a.schema
    if a.decode == "avro":
        try:
            with open(a.schema, encoding="utf-8") as f:
                schema = f.read()
        except OSError as e:
            raise ExportUsageError(f"--schema: cannot read the Avro schema file: {e}") from None
    if a.decode == "json" and not a.schema.strip():
        raise ExportUsageError("--schema: an empty DDL string")
    return ExportOptions(
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
