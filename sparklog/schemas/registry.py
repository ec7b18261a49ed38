"""The registry's state: a replay of the ``_schemas`` topic, and every change as records.

Storage: the compacted topic ``_schemas`` (one partition), with the key layout of
Confluent's Schema Registry, so its topic could be replayed here and the other way round.
Keys and values are JSON:

- ``{"keytype":"SCHEMA","subject":s,"version":v,"magic":1}`` →
  ``{"subject","version","id","schema","schemaType"?,"references"?,"deleted","guid"}``;
  null: the version was deleted permanently.
- ``{"keytype":"CONFIG","subject":s or null,"magic":0}`` → ``{"compatibilityLevel": L}``;
  null: the subject's level was deleted.
- ``{"keytype":"MODE","subject":s or null,"magic":0}`` → ``{"mode": M}``; null: deleted.
- ``{"keytype":"DELETE_SUBJECT","subject":s,"magic":0}`` → ``{"subject","version"}``:
  versions up to ``version`` are soft-deleted (Confluent's registry writes it; this one
  rewrites each ``SCHEMA`` record instead, and reads both).
- ``{"keytype":"CLEAR_SUBJECT","subject":s,"magic":0}`` → ``{"subject","version"}``:
  versions up to ``version`` are gone.
- ``{"keytype":"NOOP","magic":0}`` → ``{"maxId": n}``: the highest id ever assigned,
  written with every permanent delete, so that an id stays taken once compaction has
  removed the last record that used it (Confluent's registry skips ``NOOP`` records;
  its own have a null value, which this one ignores).

A soft delete rewrites the ``SCHEMA`` record with ``"deleted": true``; a permanent one
writes its tombstone, so compaction removes it. The latest record of a key wins, which is
what compaction keeps: replaying the compacted topic gives the same state.

Ids: a schema (its type, normal form and references, ``formats.identity``) has one id
registry-wide, reused by every subject that registers it; a new schema gets the highest id
ever seen plus one, so an id is never reused, even after a permanent delete and the
compaction of its records (the ``NOOP`` record above). Versions of a subject count up from
the highest version it has, soft-deleted ones included (after a permanent delete of its
latest versions, as in Confluent's registry, the numbers are given again). Only one
writer may assign ids: the broker leading ``_schemas`` partition 0
(``sparklog.broker.schema_registry.service``), which
applies each change under one lock after reading
the topic to its end. ``RegistryState`` itself does no
I/O: ``apply`` feeds it records, and each change returns the records to write.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparklog.errors import (
    IncompatibleSchemaError,
    InvalidModeError,
    InvalidSchemaError,
    InvalidVersionError,
    OperationNotPermittedError,
    SchemaNotFoundError,
    SchemaReferencedError,
    SubjectConfigNotFoundError,
    SubjectModeNotFoundError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
)
from sparklog.schemas import compatibility, formats
from sparklog.schemas.model import AVRO, Reference, RegisteredSchema, SubjectVersion

SCHEMAS_TOPIC = "_schemas"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
Record = tuple[bytes, bytes | None]


def _dump(obj: Any) -> bytes:
    # as Jackson writes them in Confluent's registry (UTF-8, no escapes): compaction keys
    # on the bytes, so a subject's key must be spelt as Confluent spells it
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": "MODE", "subject": subject, "magic": 0})


NOOP_KEY = _dump({"keytype": "NOOP", "magic": 0})


@dataclass
class _Version:
    version: int
    schema_id: int
    deleted: bool


@dataclass
class RegistryState:
    """Schemas, subjects, configs and modes, as of the records applied so far."""

    schemas: dict[int, RegisteredSchema] = field(default_factory=dict)
    subjects: dict[str, dict[int, _Version]] = field(default_factory=dict)
    configs: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    _by_identity: dict[Any, int] = field(default_factory=dict)
    _indexed: set[int] = field(default_factory=set)  # ids whose identity is in _by_identity
    _by_guid: dict[str, int] = field(default_factory=dict)
    _parsed: dict[int, formats.ParsedSchema] = field(default_factory=dict)

    # ------------------------------------------------------------------ replay

    def apply_all(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        for key, value in records:
            self.apply(key, value)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of ``_schemas`` (unknown or unreadable keys are skipped, as
        Confluent's registry skips them)."""
        if key is None:
            return
        try:
            k = json.loads(key)
            v = json.loads(value) if value is not None else None
            kind = k.get("keytype")
            subject = k.get("subject")
            if kind == "SCHEMA":
                self._apply_schema(str(subject), int(k["version"]), v)
            elif kind == "CONFIG":
                if v is None:
                    self.configs.pop(subject, None)
                else:
                    self.configs[subject] = dict(v)
            elif kind == "MODE":
                if v is None:
                    self.modes.pop(subject, None)
                else:
                    self.modes[subject] = str(v["mode"])
            elif kind == "NOOP" and isinstance(v, dict):
                self.max_id = max(self.max_id, int(v.get("maxId", 0)))
            elif kind in ("DELETE_SUBJECT", "CLEAR_SUBJECT") and v is not None:
                upto = int(v["version"])
                versions = self.subjects.get(str(subject), {})
                for n in [n for n in versions if n <= upto]:
                    if kind == "DELETE_SUBJECT":
                        versions[n].deleted = True
                    else:
                        del versions[n]
                if not versions:
                    self.subjects.pop(str(subject), None)
        except (ValueError, TypeError, KeyError, AttributeError):
            return

    def _apply_schema(self, subject: str, version: int, v: Any) -> None:
        versions = self.subjects.setdefault(subject, {})
        if v is None:
            versions.pop(version, None)
            if not versions:
                del self.subjects[subject]
            return
        sid = int(v["id"])
        self.max_id = max(self.max_id, sid)
        if sid not in self.schemas:
            refs = tuple(Reference.from_json(r) for r in v.get("references") or ())
            schema = RegisteredSchema(
                sid,
                str(v.get("schemaType") or AVRO),
                str(v["schema"]),
                refs,
                str(v.get("guid") or uuid.uuid5(uuid.NAMESPACE_OID, f"sparklog:{sid}")),
            )
            self.schemas[sid] = schema
            self._by_guid[schema.guid] = sid
        versions[version] = _Version(version, sid, bool(v.get("deleted", False)))

    # ------------------------------------------------------------------ reads

    def subject_names(self, *, deleted: bool = False) -> list[str]:
        return sorted(
            s
            for s, vs in self.subjects.items()
            if deleted or any(not v.deleted for v in vs.values())
        )

    def _versions(self, subject: str, *, deleted: bool = False) -> dict[int, _Version]:
        versions = self.subjects.get(subject)
        live = {n: v for n, v in (versions or {}).items() if deleted or not v.deleted}
        if not live:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        return live

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        return sorted(self._versions(subject, deleted=deleted))

    def version(self, subject: str, version: int | str, *, deleted: bool = False) -> SubjectVersion:
        """``version`` is a number, ``latest`` or -1."""
        versions = self._versions(subject, deleted=deleted)
        n = _version_number(version)
        if n == -1:
            n = max(versions)
        v = versions.get(n)
        if v is None:
            raise VersionNotFoundError(f"Version {version} not found.")
        return SubjectVersion(subject, n, self.schemas[v.schema_id], v.deleted)

    def latest(self, subject: str) -> SubjectVersion:
        return self.version(subject, -1)

    def by_id(self, schema_id: int) -> RegisteredSchema:
        schema = self.schemas.get(schema_id)
        if schema is None or not self._used(schema_id):
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        return schema

    def by_guid(self, guid: str) -> RegisteredSchema:
        sid = self._by_guid.get(str(guid).lower())
        if sid is None:
            raise SchemaNotFoundError(f"Schema {guid} not found")
        return self.by_id(sid)

    def _used(self, schema_id: int) -> bool:
        return any(v.schema_id == schema_id for vs in self.subjects.values() for v in vs.values())

    def subjects_of(self, schema_id: int, *, deleted: bool = False) -> list[tuple[str, int]]:
        """(subject, version) pairs registered with the schema ``schema_id``."""
        self.by_id(schema_id)
        return sorted(
            (s, n)
            for s, vs in self.subjects.items()
            for n, v in vs.items()
            if v.schema_id == schema_id and (deleted or not v.deleted)
        )

    def referenced_by(self, subject: str, version: int | str) -> list[int]:
        """Ids of live schemas whose references name ``subject`` ``version``."""
        sv = self.version(subject, version, deleted=True)
        return sorted(
            sid
            for sid, schema in self.schemas.items()
            if self._live(sid)
            and any(r.subject == subject and r.version == sv.version for r in schema.references)
        )

    def _live(self, schema_id: int) -> bool:
        return any(
            v.schema_id == schema_id and not v.deleted
            for vs in self.subjects.values()
            for v in vs.values()
        )

    def compatibility(self, subject: str | None, *, fallback: bool = True) -> str:
        """The compatibility level of ``subject`` (None: global)."""
        conf = self.configs.get(subject)
        if conf is None and subject is not None and not fallback:
            raise SubjectConfigNotFoundError(
                f"Subject '{subject}' does not have subject-level compatibility configured"
            )
        if conf is None and subject is not None:
            conf = self.configs.get(None)
        return str((conf or {}).get("compatibilityLevel", compatibility.DEFAULT_LEVEL))

    def mode(self, subject: str | None, *, fallback: bool = True) -> str:
        m = self.modes.get(subject)
        if m is None and subject is not None and not fallback:
            raise SubjectModeNotFoundError(f"Subject '{subject}' does not have subject-level mode")
        if m is None and subject is not None:
            m = self.modes.get(None)
        return m or "READWRITE"

    # ------------------------------------------------------------------ parsing

    def parsed(self, schema: RegisteredSchema) -> formats.ParsedSchema:
        p = self._parsed.get(schema.id)
        if p is None:
            p = formats.parse(schema.schema_type, schema.schema, self.resolve(schema.references))
            self._parsed[schema.id] = p
        return p

    def resolve(
        self, references: Sequence[Reference], _seen: frozenset[tuple[str, int]] = frozenset()
    ) -> list[tuple[Reference, formats.ParsedSchema]]:
        """The referenced schemas, transitively, dependencies first."""
        out: list[tuple[Reference, formats.ParsedSchema]] = []
        for ref in references:
            if (ref.subject, ref.version) in _seen:
                raise InvalidSchemaError(f"reference cycle through {ref.subject} {ref.version}")
            try:
                sv = self.version(ref.subject, ref.version)
            except (SubjectNotFoundError, VersionNotFoundError):
                raise InvalidSchemaError(
                    f"Invalid schema: reference {ref.name!r} to {ref.subject} version "
                    f"{ref.version} not found"
                ) from None
            inner = self.resolve(sv.schema.references, _seen | {(ref.subject, ref.version)})
            out += [x for x in inner if x[0] not in {r for r, _ in out}]
            out.append((ref, self.parsed(sv.schema)))
        return out

    def parse_request(self, schema: str, schema_type: Any, references: Any) -> formats.ParsedSchema:
        try:
            refs = tuple(Reference.from_json(r) for r in references or ())
        except (KeyError, TypeError, ValueError):
            raise InvalidSchemaError(
                "references must be {name, subject, version} objects"
            ) from None
        st = formats.schema_type_of(schema_type)
        return formats.parse(st, schema, self.resolve(refs))

    # ------------------------------------------------------------------ lookups

    def lookup(
        self, subject: str, parsed: formats.ParsedSchema, *, deleted: bool = False
    ) -> SubjectVersion:
        """The version of ``subject`` registered with ``parsed`` (POST /subjects/{s})."""
        versions = self._versions(subject, deleted=deleted)
        for n in sorted(versions, reverse=True):
            v = versions[n]
            if self._identity(v.schema_id) == parsed.identity:
                return SubjectVersion(subject, n, self.schemas[v.schema_id], v.deleted)
        raise SchemaNotFoundError("Schema not found")

    def _identity(self, schema_id: int) -> Any:
        try:
            return self.parsed(self.schemas[schema_id]).identity
        except InvalidSchemaError:
            return None

    def check(self, subject: str, parsed: formats.ParsedSchema, version: Any = None) -> list[str]:
        """Compatibility messages of ``parsed`` against ``subject`` under its level (or
        against one ``version`` of it); a subject that does not exist: compatible."""
        level = self.compatibility(subject)
        try:
            live = self._versions(subject)
        except SubjectNotFoundError:
            return []
        if version is not None:
            sv = self.version(subject, version)
            previous = [(sv.version, self.parsed(sv.schema))]
            level = level.removesuffix("_TRANSITIVE")
        else:
            previous = [(n, self.parsed(self.schemas[live[n].schema_id])) for n in sorted(live)]
        return compatibility.check(level, parsed, previous)

    # ------------------------------------------------------------------ changes

    def register(
        self,
        subject: str,
        parsed: formats.ParsedSchema,
        *,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> tuple[SubjectVersion, list[Record]]:
        """Register ``parsed`` under ``subject``: the version and the records to write
        (none when it is registered already). ``schema_id``/``version`` only in IMPORT mode."""
        mode = self.mode(subject)
        if mode.startswith("READONLY"):
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
        if (schema_id is not None or version is not None) and mode != "IMPORT":
            raise OperationNotPermittedError(
                "a schema id or version may be given only in IMPORT mode"
            )
        if mode != "IMPORT":
            try:
                return self.lookup(subject, parsed), []
            except (SubjectNotFoundError, SchemaNotFoundError):
                pass
            problems = self.check(subject, parsed)
            if problems:
                raise IncompatibleSchemaError(
                    "Schema being registered is incompatible with an earlier schema for "
                    f'subject "{subject}", details: [{"; ".join(problems)}]'
                )
        sid = schema_id if schema_id is not None else self._id_for(parsed)
        existing = self.schemas.get(sid)
        if existing is not None and self._identity(sid) not in (None, parsed.identity):
            raise OperationNotPermittedError(f"schema id {sid} is taken by another schema")
        every = self.subjects.get(subject, {})
        n = version if version is not None else max(every, default=0) + 1
        if n in every:
            raise InvalidVersionError(f"version {n} of subject {subject} exists")
        guid = existing.guid if existing is not None else str(uuid.uuid4())
        value: dict[str, Any] = {
            "subject": subject,
            "version": n,
            "id": sid,
            "schema": parsed.text,
            "deleted": False,
            "guid": guid,
        }
        if parsed.schema_type != AVRO:
            value["schemaType"] = parsed.schema_type
        if parsed.references:
            value["references"] = [r.to_json() for r in parsed.references]
        records: list[Record] = [(schema_key(subject, n), _dump(value))]
        self.apply_all(records)
        self._parsed.setdefault(sid, parsed)
        return self.version(subject, n), records

    def _id_for(self, parsed: formats.ParsedSchema) -> int:
        """The id of ``parsed`` if any subject ever registered it, else a new one."""
        for sid in self.schemas.keys() - self._indexed:
            self._indexed.add(sid)
            identity = self._identity(sid)
            if identity is not None:
                self._by_identity.setdefault(identity, sid)
        return self._by_identity.get(parsed.identity, self.max_id + 1)

    def delete_version(
        self, subject: str, version: int | str, *, permanent: bool
    ) -> tuple[int, list[Record]]:
        self._writable(subject)
        sv = self.version(subject, version, deleted=permanent)
        if not permanent and sv.deleted:
            raise VersionNotFoundError(f"Version {sv.version} not found.")
        if self.referenced_by(subject, sv.version) and not permanent:
            raise SchemaReferencedError(
                f"One or more references exist to the schema {{subject={subject}, "
                f"version={sv.version}}}"
            )
        if permanent and not sv.deleted:
            raise VersionNotSoftDeletedError(
                f"Subject '{subject}' Version {sv.version} was not deleted first before being "
                "permanently deleted"
            )
        records = [
            self._soft(subject, sv) if not permanent else (schema_key(subject, sv.version), None)
        ]
        if permanent:
            records.append(self._max_id_record())
        self.apply_all(records)
        return sv.version, records

    def delete_subject(self, subject: str, *, permanent: bool) -> tuple[list[int], list[Record]]:
        self._writable(subject)
        every = self.subjects.get(subject)
        if not every:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        live = [n for n, v in every.items() if not v.deleted]
        if permanent and live:
            raise SubjectNotSoftDeletedError(
                f"Subject '{subject}' was not deleted first before being permanently deleted"
            )
        if not permanent and not live:
            raise SubjectNotFoundError(f"Subject '{subject}' not found.")
        if not permanent:
            for n in live:
                if self.referenced_by(subject, n):
                    raise SchemaReferencedError(
                        f"One or more references exist to the schema {{subject={subject}, "
                        f"version={n}}}"
                    )
        numbers = sorted(every) if permanent else sorted(live)
        records: list[Record] = []
        for n in numbers:
            sv = self.version(subject, n, deleted=True)
            records.append((schema_key(subject, n), None) if permanent else self._soft(subject, sv))
        if permanent:
            if subject in self.configs:
                records.append((config_key(subject), None))
            if subject in self.modes:
                records.append((mode_key(subject), None))
            records.append(self._max_id_record())
        self.apply_all(records)
        return numbers, records

    def _max_id_record(self) -> Record:
        return NOOP_KEY, _dump({"maxId": self.max_id})

    def _soft(self, subject: str, sv: SubjectVersion) -> Record:
        value: dict[str, Any] = {
            "subject": subject,
            "version": sv.version,
            "id": sv.schema.id,
            "schema": sv.schema.schema,
            "deleted": True,
            "guid": sv.schema.guid,
        }
        if sv.schema.schema_type != AVRO:
            value["schemaType"] = sv.schema.schema_type
        if sv.schema.references:
            value["references"] = [r.to_json() for r in sv.schema.references]
        return schema_key(subject, sv.version), _dump(value)

    def _writable(self, subject: str) -> None:
        if self.mode(subject).startswith("READONLY"):
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")

    def set_config(self, subject: str | None, body: Any) -> tuple[dict[str, Any], list[Record]]:
        if not isinstance(body, dict) or "compatibility" not in body:
            raise compatibility_error(body)
        level = compatibility.level_of(body["compatibility"])
        value: dict[str, Any] = {"compatibilityLevel": level}
        records: list[Record] = [(config_key(subject), _dump(value))]
        self.apply_all(records)
        return {"compatibility": level}, records

    def delete_config(self, subject: str | None) -> tuple[dict[str, Any], list[Record]]:
        before = self.compatibility(subject, fallback=subject is None)
        records: list[Record] = [(config_key(subject), None)]
        self.apply_all(records)
        return {"compatibilityLevel": before}, records

    def set_mode(
        self, subject: str | None, body: Any, *, force: bool = False
    ) -> tuple[dict[str, Any], list[Record]]:
        mode = str((body or {}).get("mode", "") if isinstance(body, dict) else "").upper()
        if mode not in MODES:
            raise InvalidModeError(f"Invalid mode {mode!r}: one of {', '.join(MODES)}")
        if mode == "IMPORT" and not force:
            live = self.subject_names()
            if (subject in live) if subject is not None else live:
                raise OperationNotPermittedError(
                    "Cannot import since found existing subjects (use force=true)"
                )
        records: list[Record] = [(mode_key(subject), _dump({"mode": mode}))]
        self.apply_all(records)
        return {"mode": mode}, records

    def delete_mode(self, subject: str) -> tuple[dict[str, Any], list[Record]]:
        before = self.mode(subject, fallback=False)
        records: list[Record] = [(mode_key(subject), None)]
        self.apply_all(records)
        return {"mode": before}, records


def compatibility_error(body: Any) -> Exception:
    from sparklog.errors import InvalidCompatibilityLevelError

    return InvalidCompatibilityLevelError(f"Invalid compatibility level in {body!r}")


def _version_number(version: int | str) -> int:
    if isinstance(version, str):
        if version.strip().lower() == "latest":
            return -1
        try:
            version = int(version)
        except ValueError:
            raise InvalidVersionError(
                f"The specified version '{version}' is not a valid version id. Allowed "
                'values are between [1, 2^31-1] and the string "latest"'
            ) from None
    if version != -1 and not 1 <= version <= 2**31 - 1:
        raise InvalidVersionError(
            f"The specified version '{version}' is not a valid version id. Allowed values "
            'are between [1, 2^31-1] and the string "latest"'
        )
    return version
