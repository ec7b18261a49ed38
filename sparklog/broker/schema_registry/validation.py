"""Broker-side schema validation: Confluent Server's ``confluent.*.schema.validation``.

A topic with ``confluent.value.schema.validation=true`` (``confluent.key...`` for keys)
takes only records whose value is null (a tombstone) or carries a schema id registered,
under the subject the topic's ``confluent.value.subject.name.strategy`` names, in this
broker's registry (``_schemas``):

- framed: magic byte 0, then the id as a big-endian int32 (Confluent's wire format);
- or, unframed, a ``__value_schema_id`` header holding magic byte 1 and the schema's
  16-byte GUID (confluent-kafka's header serializer).

Subjects: ``TopicNameStrategy`` (default) ``<topic>-value``; ``RecordNameStrategy`` the
schema's record name (Avro: its full name; JSON Schema: its ``title``);
``TopicRecordNameStrategy`` ``<topic>-<record name>``. A batch with any other record is
refused whole with INVALID_RECORD, each bad record named (KIP-467 record errors); nothing
of it is written. The check is vectorised over the batch (the distinct ids are looked up,
not each record); an id the broker does not know yet makes it read ``_schemas`` once more
before refusing (a schema registered through another broker a moment ago).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import SchemaRegistryError
from sparklog.schemas.model import KEY_SCHEMA_ID_HEADER, VALUE_SCHEMA_ID_HEADER
from sparklog.schemas.registry import RegistryState

if TYPE_CHECKING:
    from sparklog.broker.schema_registry.service import SchemaRegistryService
    from sparklog.storage.config import TopicConfig


def check_records(
    service: SchemaRegistryService, topic: str, records: pa.RecordBatch, config: TopicConfig
) -> list[tuple[int, str]]:
    """(record index, why) of every record the topic's validation refuses."""
    bad: list[tuple[int, str]] = []
    if config.value_schema_validation:
        bad += _check(service, topic, records, "value", config.value_subject_name_strategy)
    if config.key_schema_validation:
        bad += _check(service, topic, records, "key", config.key_subject_name_strategy)
    return sorted(bad)


def _check(
    service: SchemaRegistryService,
    topic: str,
    records: pa.RecordBatch,
    column: str,
    strategy: str,
) -> list[tuple[int, str]]:
    data = records.column(column)
    n = len(data)
    if n == 0:
        return []
    framed = pc.and_(
        pc.greater_equal(pc.binary_length(data), 5),
        pc.equal(pc.binary_slice(data, 0, 1), pa.scalar(b"\x00", pa.binary())),
    )
    framed = pc.fill_null(framed, False)
    ids = pc.binary_slice(data, 1, 5)
    present = pc.and_(pc.invert(framed), data.is_valid())
    unframed = pc.indices_nonzero(present).to_pylist()
    wanted: dict[int, list[int]] = {}  # schema id -> rows
    for sid in pc.unique(pc.filter(ids, framed)).to_pylist():
        wanted[int.from_bytes(sid, "big")] = []
    header = KEY_SCHEMA_ID_HEADER if column == "key" else VALUE_SCHEMA_ID_HEADER
    guids: dict[int, str] = {}
    if unframed:
        headers = records.column("headers").to_pylist() if "headers" in records.schema.names else []
        for i in unframed:
            guid = _header_guid(headers[i] if headers else None, header)
            if guid is not None:
                guids[i] = guid
    state = service.state
    missing = [sid for sid in wanted if not _known(state, sid)]
    missing_guids = [g for g in guids.values() if _guid_id(state, g) is None]
    if missing or missing_guids:
        state = service.refresh()
    bad: list[tuple[int, str]] = []
    allowed_ids = {sid for sid in wanted if _allowed(state, topic, column, strategy, sid)}
    if len(allowed_ids) < len(wanted):
        rows = pc.indices_nonzero(framed).to_pylist()
        for i, sid in zip(rows, pc.filter(ids, framed).to_pylist(), strict=True):
            value = int.from_bytes(sid, "big")
            if value not in allowed_ids:
                bad.append((i, _why(state, topic, column, strategy, value)))
    for i in unframed:
        guid = guids.get(i)
        if guid is None:
            bad.append(
                (
                    i,
                    f"the {column} has no schema id (neither Confluent's 5-byte prefix "
                    f"nor a {header} header)",
                )
            )
            continue
        sid = _guid_id(state, guid)
        if sid is None:
            bad.append((i, f"the {column}'s schema GUID {guid} is not registered"))
        elif not _allowed(state, topic, column, strategy, sid):
            bad.append((i, _why(state, topic, column, strategy, sid)))
    return bad


def _header_guid(headers: object, name: str) -> str | None:
    for h in headers or ():  # type: ignore[attr-defined]
        if h.get("key") == name and h.get("value") is not None:
            raw = h["value"]
            if len(raw) >= 17 and raw[0] == 1:
                return str(uuid.UUID(bytes=bytes(raw[1:17])))
    return None


def _known(state: RegistryState, sid: int) -> bool:
    try:
        state.by_id(sid)
        return True
    except SchemaRegistryError:
        return False


def _guid_id(state: RegistryState, guid: str) -> int | None:
    try:
        return state.by_guid(guid).id
    except SchemaRegistryError:
        return None


def subjects_for(
    state: RegistryState, topic: str, column: str, strategy: str, sid: int
) -> list[str]:
    """The subjects under which schema ``sid`` would be valid for ``topic``'s ``column``."""
    if strategy == "TopicNameStrategy":
        return [f"{topic}-{column}"]
    name = _record_name(state, sid)
    if name is None:
        return []
    return [name] if strategy == "RecordNameStrategy" else [f"{topic}-{name}"]


def _record_name(state: RegistryState, sid: int) -> str | None:
    try:
        parsed = state.parsed(state.by_id(sid))
    except SchemaRegistryError:
        return None
    if parsed.schema_type == "AVRO":
        return getattr(parsed.parsed, "fullname", None)
    title = parsed.parsed.get("title") if isinstance(parsed.parsed, dict) else None
    return str(title) if title else None


def _allowed(state: RegistryState, topic: str, column: str, strategy: str, sid: int) -> bool:
    if not _known(state, sid):
        return False
    registered = {s for s, _ in state.subjects_of(sid)}
    return any(s in registered for s in subjects_for(state, topic, column, strategy, sid))


def _why(state: RegistryState, topic: str, column: str, strategy: str, sid: int) -> str:
    if not _known(state, sid):
        return f"the {column}'s schema id {sid} is not registered"
    subjects = subjects_for(state, topic, column, strategy, sid)
    return (
        f"the {column}'s schema id {sid} is not registered under subject "
        f"{' or '.join(subjects) or '(none: the schema has no record name)'} ({strategy})"
    )
