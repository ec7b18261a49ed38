"""What the registry keeps: schemas (by id), subjects' versions of them, references."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
#: the schema types this registry parses and checks (``GET /schemas/types``)
SCHEMA_TYPES = (AVRO, JSON)
#: Confluent's wire format: magic byte 0, then the schema id as a big-endian int32
MAGIC = 0
#: the header that carries the schema's GUID (magic byte 1 + 16 bytes) instead of a prefix
KEY_SCHEMA_ID_HEADER = "__key_schema_id"
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"
#: the broker config (Confluent Server's name) that says where a broker serves the registry
REGISTRY_URL_CONFIG = "confluent.schema.registry.url"


@dataclass(frozen=True)
class Reference:
    """A named dependency of a schema: ``name`` (an Avro full name or a JSON Schema
    ``$ref`` URL) is version ``version`` of ``subject``."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}

    @classmethod
    def from_json(cls, d: Any) -> Reference:
        return cls(str(d["name"]), str(d["subject"]), int(d["version"]))


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema as the registry holds it, under its global ``id`` (and ``guid``)."""

    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    guid: str = ""

    def to_json(self) -> dict[str, Any]:
        """As ``GET /schemas/ids/{id}`` answers (type and references only when present)."""
        out: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != AVRO:
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        if self.guid:
            out["guid"] = self.guid
        return out


@dataclass(frozen=True)
class SubjectVersion:
    """Version ``version`` of ``subject`` is ``schema``."""

    subject: str
    version: int
    schema: RegisteredSchema
    deleted: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """As ``GET /subjects/{s}/versions/{v}`` answers."""
        return {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema.id,
            **self.schema.to_json(),
        }
