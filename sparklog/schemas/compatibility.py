"""Compatibility of a new schema with a subject's earlier ones, as Confluent's registry
defines the levels:

| level | the new schema must |
|---|---|
| BACKWARD (default) | read data written with the latest version |
| BACKWARD_TRANSITIVE | read data written with every version |
| FORWARD | have its data readable by the latest version |
| FORWARD_TRANSITIVE | have its data readable by every version |
| FULL | both, with the latest version |
| FULL_TRANSITIVE | both, with every version |
| NONE | nothing |

Soft-deleted versions do not count. Avro is checked with the Apache ``avro`` package's
``ReaderWriterCompatibilityChecker`` (schema resolution as the Avro specification
defines it); JSON Schema with ``sparklog.schemas.jsoncompat`` (its docstring lists the
rules). Schemas of different types are never compatible.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparklog.errors import InvalidCompatibilityLevelError
from sparklog.schemas.formats import ParsedSchema
from sparklog.schemas.model import AVRO

LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
DEFAULT_LEVEL = "BACKWARD"


def level_of(raw: object) -> str:
    level = str(raw or "").upper()
    if level not in LEVELS:
        raise InvalidCompatibilityLevelError(
            f"Invalid compatibility level {raw!r}: one of {', '.join(LEVELS)}"
        )
    return level


def reader_writer(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"schema type changed from {writer.schema_type} to {reader.schema_type}"]
    if reader.schema_type == AVRO:
        from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

        result = ReaderWriterCompatibilityChecker().get_compatibility(  # type: ignore[no-untyped-call]
            reader.parsed, writer.parsed
        )
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = sorted(str(getattr(k, "value", k)) for k in result.incompatibilities)
        return [
            f"{', '.join(kinds)} at {', '.join(sorted(result.locations))}"
            + (
                f" ({', '.join(sorted(str(m) for m in result.messages))})"
                if result.messages
                else ""
            )
        ]
    from sparklog.schemas.jsoncompat import incompatibilities

    return incompatibilities(reader.parsed, writer.parsed)


def check(level: str, new: ParsedSchema, previous: Sequence[tuple[int, ParsedSchema]]) -> list[str]:
    """Why ``new`` may not follow ``previous`` ((version, schema), oldest first) under
    ``level``; empty: it may."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    out: list[str] = []
    for version, old in against:
        if level.startswith(("BACKWARD", "FULL")):
            out += [f"{m} (reading data of version {version})" for m in reader_writer(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            out += [f"{m} (data read by version {version})" for m in reader_writer(old, new)]
    return out
