"""The export job's options: a typed value that checks, when it is made, that its options
go together (errors are ``ExportUsageError`` and name the command-line option, as
``./spark-submit.sh export`` takes them: ``sparklog.cli.export``).

``decode="registry"``: values framed by a schema registry (Confluent's wire format, as
confluent-kafka's serializers and the sparklog sink write them) decoded with the schemas
of ``subject`` (default ``<topic>-value``), version ``schema_version`` (default: the
latest when the export starts) as the reader schema, from the registry at
``registry_url`` or, by default, the storage root's own ``_schemas`` topic; an https
registry is verified with ``registry_ca_file`` (default: the system's CAs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparklog.errors import ExportUsageError
from sparklog.storage import names

FORMATS = ("parquet", "delta", "avro", "json")
#: the options only ``--decode registry`` takes, by command-line flag
REGISTRY_FLAGS = {
    "--subject": "subject",
    "--schema-version": "schema_version",
    "--schema-registry-url": "registry_url",
    "--schema-registry-ca-file": "registry_ca_file",
}


@dataclass(frozen=True)
class ExportOptions:
    """What one export reads, how it decodes values, and where it writes it (checked when
    made: ``__post_init__``)."""

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

    def __post_init__(self) -> None:
        """Refuse options that contradict each other (the checks of the command line, in
        its order: the first one wrong is named)."""
        try:
            names.validate_topic_name(self.topic)
        except ValueError as e:
            raise ExportUsageError(f"--topic: {e}") from None
        if self.incremental and not self.checkpoint:
            raise ExportUsageError("--incremental needs --checkpoint PATH (where progress is kept)")
        if self.checkpoint and not self.incremental:
            raise ExportUsageError("--checkpoint is only for --incremental exports")
        if self.incremental and self.ending_offsets:
            raise ExportUsageError("--ending-offsets contradicts --incremental (it has no end)")
        if self.max_records_per_batch is not None and (
            not self.incremental or self.max_records_per_batch < 1
        ):
            raise ExportUsageError("--max-records-per-batch needs --incremental and N >= 1")
        if self.decode == "registry":
            self._check_registry()
        else:
            if (self.decode is None) != (self.schema is None):
                raise ExportUsageError("--decode and --schema go together")
            for flag, value in REGISTRY_FLAGS.items():
                if getattr(self, value) is not None:
                    raise ExportUsageError(f"{flag} is for --decode registry")
        if self.upsert and self.format != "delta":
            raise ExportUsageError(
                "--upsert needs --format delta (a table to merge into; files cannot be updated)"
            )
        if self.decode == "json" and not (self.schema or "").strip():
            raise ExportUsageError("--schema: an empty DDL string")

    def _check_registry(self) -> None:
        if self.schema is not None:
            raise ExportUsageError(
                "--decode registry takes its schemas from the registry, not --schema"
            )
        if self.schema_version is not None and self.schema_version < 1:
            raise ExportUsageError("--schema-version must be a version >= 1")
        if self.registry_ca_file is not None:
            url = self.registry_url or ""
            if not url.lower().startswith("https://"):
                raise ExportUsageError(
                    "--schema-registry-ca-file needs an https:// --schema-registry-url"
                )
            if not os.path.isfile(self.registry_ca_file):
                raise ExportUsageError(
                    f"--schema-registry-ca-file: no such file {self.registry_ca_file!r}"
                )

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
