"""The registry's state machine (``sparklog.schemas.registry.RegistryState``) without a
broker: ids, normal forms, versions, deletes, replay of its own and Confluent's records,
compatibility levels, modes and references."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparklog.errors import (
    IncompatibleSchemaError,
    InvalidModeError,
    InvalidSchemaError,
    InvalidVersionError,
    OperationNotPermittedError,
    SchemaNotFoundError,
    SchemaReferencedError,
    SubjectConfigNotFoundError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
)
from sparklog.schemas.formats import ParsedSchema
from sparklog.schemas.model import Reference, SubjectVersion
from sparklog.schemas.registry import Record, RegistryState


def record(name: str, *fields: dict[str, Any], namespace: str | None = None) -> str:
    doc: dict[str, Any] = {"type": "record", "name": name, "fields": list(fields)}
    if namespace:
        doc["namespace"] = namespace
    return json.dumps(doc)


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


USER = record("User", f("name", "string"))
USER_AGE = record("User", f("name", "string"), f("age", "int", default=0))
ORDER = record("Order", f("id", "long"))


class Registry:
    """A ``RegistryState`` that keeps every record its changes returned, in order: the
    ``_schemas`` topic a broker would have written."""

    def __init__(self) -> None:
        self.state = RegistryState()
        self.log: list[Record] = []

    def parse(self, schema: str, schema_type: str | None = None, refs: Any = None) -> ParsedSchema:
        return self.state.parse_request(schema, schema_type, refs)

    def register(self, subject: str, schema: str, **kw: Any) -> SubjectVersion:
        refs = kw.pop("references", None)
        sv, records = self.state.register(
            subject, self.parse(schema, kw.pop("schema_type", None), refs), **kw
        )
        self.log += records
        return sv

    def change(self, result: tuple[Any, list[Record]]) -> Any:
        self.log += result[1]
        return result[0]

    def delete_version(self, subject: str, version: int | str, permanent: bool = False) -> int:
        return int(self.change(self.state.delete_version(subject, version, permanent=permanent)))

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return list(self.change(self.state.delete_subject(subject, permanent=permanent)))

    def set_level(self, subject: str | None, level: str) -> None:
        self.change(self.state.set_config(subject, {"compatibility": level}))

    def set_mode(self, subject: str | None, mode: str, force: bool = False) -> None:
        self.change(self.state.set_mode(subject, {"mode": mode}, force=force))

    def replay(self, records: list[Record] | None = None) -> RegistryState:
        state = RegistryState()
        state.apply_all(self.log if records is None else records)
        return state

    def compacted(self) -> list[Record]:
        """What compaction keeps once tombstones expired: the last value of each key."""
        last: dict[bytes, bytes | None] = {}
        for key, value in self.log:
            last.pop(key, None)
            last[key] = value
        return [(k, v) for k, v in last.items() if v is not None]


@pytest.fixture
def reg() -> Registry:
    return Registry()


def summary(state: RegistryState) -> Any:
    """Everything a client can observe of a state."""
    subjects = {}
    for s in state.subject_names(deleted=True):
        subjects[s] = [
            (sv.version, sv.schema.id, sv.deleted, sv.schema.schema, sv.schema.guid)
            for sv in (state.version(s, n, deleted=True) for n in state.versions(s, deleted=True))
        ]
    return subjects, dict(state.configs), dict(state.modes), state.max_id


# ---------------------------------------------------------------------------- ids


def test_one_schema_has_one_id_across_subjects(reg: Registry) -> None:
    a = reg.register("a-value", USER)
    b = reg.register("b-value", USER)
    assert (a.schema.id, b.schema.id) == (1, 1)
    assert (a.version, b.version) == (1, 1)
    assert reg.state.subjects_of(1) == [("a-value", 1), ("b-value", 1)]


def test_spellings_of_one_avro_schema_get_one_id(reg: Registry) -> None:
    first = reg.register("a-value", USER)
    spelt = [
        '{"fields": [{"type": "string", "name": "name"}], "name": "User", "type": "record"}',
        '{ "type" : "record" ,\n "name":"User",\t"fields":[{"name":"name","type":"string"}]}',
        '{"type":"record","name":"User","fields":[{"name":"name","type":{"type":"string"}}]}',
    ]
    for i, text in enumerate(spelt):
        sv = reg.register(f"s{i}-value", text)
        assert sv.schema.id == first.schema.id
    assert reg.state.max_id == 1


def test_a_primitive_in_both_spellings_is_one_schema(reg: Registry) -> None:
    a = reg.register("a-value", '{"type": "string"}')
    b = reg.register("b-value", '"string"')
    assert a.schema.id == b.schema.id
    assert a.schema.schema == '"string"'


def test_json_schema_key_order_and_spacing_give_one_id(reg: Registry) -> None:
    a = reg.register("a-value", '{"type":"object","properties":{"x":{"type":"integer"}}}',
                     schema_type="JSON")  # fmt: skip
    b = reg.register("b-value", '{ "properties": {"x": {"type": "integer"}}, "type": "object" }',
                     schema_type="JSON")  # fmt: skip
    assert a.schema.id == b.schema.id
    assert a.schema.schema_type == "JSON"


def test_the_same_text_of_another_type_is_another_schema(reg: Registry) -> None:
    avro = reg.register("a-value", '{"type": "string"}')
    js = reg.register("b-value", '{"type": "string"}', schema_type="JSON")
    assert avro.schema.id != js.schema.id


def test_a_new_schema_gets_the_next_id(reg: Registry) -> None:
    assert reg.register("a-value", USER).schema.id == 1
    assert reg.register("b-value", ORDER).schema.id == 2
    assert reg.register("a-value", USER_AGE).schema.id == 3


def test_versions_count_up(reg: Registry) -> None:
    assert reg.register("a-value", USER).version == 1
    assert reg.register("a-value", USER_AGE).version == 2
    assert reg.state.versions("a-value") == [1, 2]
    assert reg.state.latest("a-value").schema.id == 2


def test_registering_again_answers_the_existing_version_and_writes_nothing(
    reg: Registry,
) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    sv, records = reg.state.register("a-value", reg.parse(USER))
    assert (sv.version, sv.schema.id, records) == (1, 1, [])


def test_a_schema_registered_again_after_a_soft_delete_is_a_new_version_same_id(
    reg: Registry,
) -> None:
    reg.register("a-value", USER)
    reg.delete_subject("a-value")
    sv = reg.register("a-value", USER)
    assert (sv.version, sv.schema.id) == (2, 1)


def test_invalid_schemas_are_refused(reg: Registry) -> None:
    bad = [
        "", "{", '{"type": "strin"}',
        record("A", f("x", "int", default="not an int")),
        '{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
    ]  # fmt: skip
    for text in bad:
        with pytest.raises(InvalidSchemaError):
            reg.parse(text)
    with pytest.raises(InvalidSchemaError):
        reg.parse('{"type": "nonsense"}', "JSON")
    with pytest.raises(InvalidSchemaError):
        reg.parse('syntax = "proto3";', "PROTOBUF")


def test_defaults_of_every_kind_are_accepted(reg: Registry) -> None:
    text = record(
        "All",
        f("u", ["null", "string"], default=None),
        f("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]}, default="B"),
        f("b", "bytes", default="\u00ff"),
        f("d", "double", default=1),
        f("m", {"type": "map", "values": "long"}, default={"k": 1}),
        f("r", {"type": "record", "name": "In", "fields": [f("q", "int", default=1)]},
          default={}),
    )  # fmt: skip
    assert reg.register("all-value", text).schema.id == 1


# ---------------------------------------------------------------------------- deletes


def test_soft_delete_hides_a_version_but_its_id_is_still_served(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    assert reg.delete_version("a-value", 2) == 2
    assert reg.state.versions("a-value") == [1]
    assert reg.state.versions("a-value", deleted=True) == [1, 2]
    with pytest.raises(VersionNotFoundError):
        reg.state.version("a-value", 2)
    assert reg.state.version("a-value", 2, deleted=True).deleted
    assert reg.state.by_id(2).schema == reg.parse(USER_AGE).text
    assert reg.state.latest("a-value").version == 1


def test_soft_deleting_twice_is_version_not_found(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    reg.delete_version("a-value", 1)
    with pytest.raises(VersionNotFoundError):
        reg.delete_version("a-value", 1)


def test_a_soft_deleted_subject_is_not_listed_but_is_with_deleted(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("b-value", ORDER)
    assert reg.delete_subject("a-value") == [1]
    assert reg.state.subject_names() == ["b-value"]
    assert reg.state.subject_names(deleted=True) == ["a-value", "b-value"]
    with pytest.raises(SubjectNotFoundError):
        reg.state.versions("a-value")
    with pytest.raises(SubjectNotFoundError):
        reg.delete_subject("a-value")


def test_a_permanent_delete_needs_a_soft_delete_first(reg: Registry) -> None:
    reg.register("a-value", USER)
    with pytest.raises(VersionNotSoftDeletedError) as version_error:
        reg.delete_version("a-value", 1, permanent=True)
    with pytest.raises(SubjectNotSoftDeletedError) as subject_error:
        reg.delete_subject("a-value", permanent=True)
    assert (version_error.value.code, subject_error.value.code) == (40407, 40405)


def test_a_permanent_delete_removes_the_version(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    reg.delete_version("a-value", 2)
    assert reg.delete_version("a-value", 2, permanent=True) == 2
    assert reg.state.versions("a-value", deleted=True) == [1]
    with pytest.raises(SchemaNotFoundError):
        reg.state.by_id(2)


def test_a_permanently_deleted_subject_is_gone(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.set_level("a-value", "NONE")
    reg.delete_subject("a-value")
    assert reg.delete_subject("a-value", permanent=True) == [1]
    assert reg.state.subject_names(deleted=True) == []
    with pytest.raises(SubjectNotFoundError):
        reg.state.versions("a-value", deleted=True)
    with pytest.raises(SchemaNotFoundError):
        reg.state.by_id(1)
    assert reg.state.compatibility("a-value") == "BACKWARD"  # its level went with it


def test_an_id_used_by_another_subject_survives_a_permanent_delete(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("b-value", USER)
    reg.delete_subject("a-value")
    reg.delete_subject("a-value", permanent=True)
    assert reg.state.by_id(1).schema == reg.parse(USER).text
    assert reg.state.subjects_of(1) == [("b-value", 1)]


def test_ids_are_not_reused_after_a_permanent_delete(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("b-value", ORDER)
    reg.delete_subject("b-value")
    reg.delete_subject("b-value", permanent=True)
    assert reg.register("c-value", USER_AGE).schema.id == 3


def test_ids_are_not_reused_after_compaction_removed_a_deleted_schema(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("b-value", ORDER)
    reg.delete_subject("b-value")
    reg.delete_subject("b-value", permanent=True)
    state = reg.replay(reg.compacted())
    sv, _ = state.register("c-value", state.parse_request(USER_AGE, None, None))
    assert sv.schema.id == 3


# ---------------------------------------------------------------------------- replay


def test_replaying_the_records_gives_the_same_state(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    reg.register("b-value", ORDER)
    reg.register("j-value", '{"type":"object"}', schema_type="JSON")
    reg.set_level(None, "FULL")
    reg.set_level("b-value", "NONE")
    reg.set_mode("j-value", "READONLY")
    reg.delete_version("a-value", 1)
    reg.register("c-value", USER)
    reg.delete_subject("c-value")
    reg.delete_subject("c-value", permanent=True)
    assert summary(reg.replay()) == summary(reg.state)


def test_replaying_the_compacted_records_gives_the_same_state(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    reg.register("b-value", ORDER)
    reg.delete_version("a-value", 2)
    reg.delete_version("a-value", 2, permanent=True)
    reg.set_level("a-value", "FORWARD")
    reg.delete_subject("b-value")
    assert summary(reg.replay(reg.compacted())) == summary(reg.state)


def test_replay_reads_a_confluent_delete_subject_record(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    reg.register("a-value", record("User", f("name", "string"), f("x", "int", default=1)))
    key = b'{"keytype":"DELETE_SUBJECT","subject":"a-value","magic":0}'
    state = reg.replay([*reg.log, (key, b'{"subject":"a-value","version":2}')])
    assert state.versions("a-value") == [3]
    assert state.versions("a-value", deleted=True) == [1, 2, 3]


def test_replay_reads_a_confluent_clear_subject_record(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.register("a-value", USER_AGE)
    key = b'{"keytype":"CLEAR_SUBJECT","subject":"a-value","magic":0}'
    state = reg.replay([*reg.log, (key, b'{"subject":"a-value","version":2}')])
    assert state.subject_names(deleted=True) == []


def test_replay_reads_records_as_confluent_writes_them() -> None:
    """A ``_schemas`` topic written by Confluent's registry: no guid, extra fields, NOOPs."""
    schema = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}'
    records: list[tuple[bytes | None, bytes | None]] = [
        (b'{"keytype":"NOOP","magic":0}', None),
        (b'{"keytype":"SCHEMA","subject":"u-value","version":1,"magic":1}',
         json.dumps({"subject": "u-value", "version": 1, "id": 7, "schema": schema,
                     "deleted": False, "metadata": None, "ruleSet": None}).encode()),
        (b'{"keytype":"CONFIG","subject":"u-value","magic":0}',
         b'{"compatibilityLevel":"FULL","normalize":null}'),
        (b'{"keytype":"MODE","subject":null,"magic":0}', b'{"mode":"READONLY"}'),
        (b"not json", b"{}"),
        (None, b"{}"),
        (b'{"keytype":"SOMETHING_NEW","magic":0}', b"{}"),
    ]  # fmt: skip
    state = RegistryState()
    state.apply_all(records)
    assert state.latest("u-value").schema.id == 7
    assert state.by_guid(state.by_id(7).guid).id == 7
    assert state.compatibility("u-value") == "FULL"
    assert state.mode("u-value") == "READONLY"
    assert state.max_id == 7


def test_keys_are_spelt_as_confluent_spells_them(reg: Registry) -> None:
    reg.register("ünï-value", USER)
    reg.set_level("ünï-value", "NONE")
    keys = [k for k, _ in reg.log]
    assert keys[0] == '{"keytype":"SCHEMA","subject":"ünï-value","version":1,"magic":1}'.encode()
    assert keys[1] == '{"keytype":"CONFIG","subject":"ünï-value","magic":0}'.encode()


# ---------------------------------------------------------------------------- compatibility

#: S1 → S2 → S3: each step is FULL with the one before, but S3 cannot read S1's data
S1 = record("R", f("a", "int"))
S2 = record("R", f("a", "int"), f("b", "string", default=""))
S3 = record("R", f("a", "int"), f("b", "string"))
#: T1 → T2 → T3: each step is FORWARD with the one before, but T1 cannot read T3's data
T1 = record("R", f("a", "int"), f("b", "string"))
T2 = record("R", f("a", "int"), f("b", "string", default=""))
T3 = record("R", f("a", "int"))
ADD_FIELD_NO_DEFAULT = record("R", f("a", "int"), f("c", "long"))
REMOVE_FIELD = record("R", f("z", "int", default=0))
RETYPE = record("R", f("a", "string"))


def evolve(reg: Registry, level: str, *schemas: str) -> SubjectVersion:
    reg.set_level("r-value", level)
    out = None
    for text in schemas:
        out = reg.register("r-value", text)
    assert out is not None
    return out


@pytest.mark.parametrize(
    ("level", "ok", "refused"),
    [
        ("BACKWARD", [S1, S2], [S1, ADD_FIELD_NO_DEFAULT]),
        ("FORWARD", [S1, ADD_FIELD_NO_DEFAULT], [S1, REMOVE_FIELD]),
        ("FULL", [S1, S2], [S1, ADD_FIELD_NO_DEFAULT]),
        ("NONE", [S1, RETYPE], None),
    ],
)
def test_a_level_takes_some_changes_and_refuses_others(
    reg: Registry, level: str, ok: list[str], refused: list[str] | None
) -> None:
    assert evolve(reg, level, *ok).version == 2
    if refused is not None:
        other = Registry()
        with pytest.raises(IncompatibleSchemaError) as e:
            evolve(other, level, *refused)
        assert e.value.code == 409 and "r-value" in str(e.value)
        assert other.state.versions("r-value") == [1]


def test_full_refuses_a_change_that_only_backward_takes(reg: Registry) -> None:
    widened = record("R", f("a", "long"))  # a long reads an int, an int no long
    assert evolve(reg, "BACKWARD", S1, widened).version == 2
    with pytest.raises(IncompatibleSchemaError):
        evolve(Registry(), "FULL", S1, widened)


def test_backward_checks_the_latest_version_only(reg: Registry) -> None:
    assert evolve(reg, "BACKWARD", S1, S2, S3).version == 3


def test_backward_transitive_checks_every_version(reg: Registry) -> None:
    with pytest.raises(IncompatibleSchemaError):
        evolve(reg, "BACKWARD_TRANSITIVE", S1, S2, S3)


def test_forward_checks_the_latest_version_only(reg: Registry) -> None:
    assert evolve(reg, "FORWARD", T1, T2, T3).version == 3


def test_forward_transitive_checks_every_version(reg: Registry) -> None:
    with pytest.raises(IncompatibleSchemaError):
        evolve(reg, "FORWARD_TRANSITIVE", T1, T2, T3)


def test_full_checks_the_latest_version_only(reg: Registry) -> None:
    assert evolve(reg, "FULL", S1, S2, S3).version == 3


def test_full_transitive_checks_every_version(reg: Registry) -> None:
    with pytest.raises(IncompatibleSchemaError):
        evolve(reg, "FULL_TRANSITIVE", S1, S2, S3)


def test_soft_deleted_versions_do_not_count(reg: Registry) -> None:
    evolve(reg, "BACKWARD_TRANSITIVE", S1, S2)
    reg.delete_version("r-value", 1)
    assert reg.register("r-value", S3).version == 3


def test_check_against_one_version_ignores_transitivity(reg: Registry) -> None:
    evolve(reg, "NONE", S1, S2)
    reg.set_level("r-value", "BACKWARD_TRANSITIVE")
    assert reg.state.check("r-value", reg.parse(S3), 2) == []
    assert reg.state.check("r-value", reg.parse(S3), 1) != []
    assert reg.state.check("r-value", reg.parse(S3)) != []


def test_a_missing_subject_is_compatible_with_anything(reg: Registry) -> None:
    assert reg.state.check("nobody-value", reg.parse(S1)) == []


def test_a_change_of_schema_type_is_incompatible(reg: Registry) -> None:
    reg.register("r-value", '{"type": "string"}')
    with pytest.raises(IncompatibleSchemaError):
        reg.register("r-value", '{"type": "string"}', schema_type="JSON")


def test_a_subject_level_overrides_the_global_one(reg: Registry) -> None:
    reg.set_level(None, "FULL")
    assert reg.state.compatibility("x-value") == "FULL"
    reg.set_level("x-value", "NONE")
    assert reg.state.compatibility("x-value") == "NONE"
    assert reg.state.compatibility(None) == "FULL"
    reg.change(reg.state.delete_config("x-value"))
    assert reg.state.compatibility("x-value") == "FULL"
    with pytest.raises(SubjectConfigNotFoundError):
        reg.state.compatibility("x-value", fallback=False)


def test_an_unknown_level_is_refused(reg: Registry) -> None:
    from sparklog.errors import InvalidCompatibilityLevelError

    with pytest.raises(InvalidCompatibilityLevelError):
        reg.set_level(None, "SIDEWAYS")


# ---------------------------------------------------------------------------- modes


def test_readonly_refuses_changes(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.set_mode("a-value", "READONLY")
    with pytest.raises(OperationNotPermittedError):
        reg.register("a-value", USER_AGE)
    with pytest.raises(OperationNotPermittedError):
        reg.delete_version("a-value", 1)
    with pytest.raises(OperationNotPermittedError):
        reg.delete_subject("a-value")
    assert reg.register("b-value", USER).schema.id == 1  # only that subject


def test_a_global_readonly_mode_covers_every_subject(reg: Registry) -> None:
    reg.set_mode(None, "READONLY_OVERRIDE")
    with pytest.raises(OperationNotPermittedError):
        reg.register("a-value", USER)
    reg.set_mode("a-value", "READWRITE")
    assert reg.register("a-value", USER).version == 1


def test_an_unknown_mode_is_refused(reg: Registry) -> None:
    with pytest.raises(InvalidModeError):
        reg.set_mode(None, "SOMETIMES")


def test_import_mode_registers_with_the_given_id_and_version(reg: Registry) -> None:
    reg.set_mode(None, "IMPORT")
    sv = reg.register("a-value", USER, schema_id=100, version=5)
    assert (sv.schema.id, sv.version) == (100, 5)
    reg.set_mode(None, "READWRITE")
    assert reg.register("b-value", ORDER).schema.id == 101
    assert reg.register("a-value", USER_AGE).version == 6
    assert summary(reg.replay()) == summary(reg.state)


def test_an_id_or_version_outside_import_mode_is_refused(reg: Registry) -> None:
    with pytest.raises(OperationNotPermittedError):
        reg.register("a-value", USER, schema_id=100)


def test_import_mode_refuses_an_id_taken_by_another_schema(reg: Registry) -> None:
    reg.register("a-value", USER)
    reg.set_mode(None, "IMPORT", force=True)
    with pytest.raises(OperationNotPermittedError):
        reg.register("b-value", ORDER, schema_id=1)
    with pytest.raises(InvalidVersionError):
        reg.register("a-value", ORDER, schema_id=2, version=1)


def test_import_mode_needs_force_when_subjects_exist(reg: Registry) -> None:
    reg.register("a-value", USER)
    with pytest.raises(OperationNotPermittedError):
        reg.set_mode(None, "IMPORT")
    with pytest.raises(OperationNotPermittedError):
        reg.set_mode("a-value", "IMPORT")
    reg.set_mode("new-value", "IMPORT")  # a subject without versions may import
    assert reg.state.mode("new-value") == "IMPORT"


def test_a_subject_mode_falls_back_to_the_global_one(reg: Registry) -> None:
    from sparklog.errors import SubjectModeNotFoundError

    reg.set_mode(None, "READONLY")
    assert reg.state.mode("a-value") == "READONLY"
    with pytest.raises(SubjectModeNotFoundError):
        reg.state.mode("a-value", fallback=False)


# ---------------------------------------------------------------------------- references

ADDRESS = record("Address", f("street", "string"), namespace="com.example")
PERSON = record("Person", f("name", "string"), f("home", "com.example.Address"))
PERSON_REFS = [{"name": "com.example.Address", "subject": "address", "version": 1}]


def test_an_avro_schema_uses_a_named_type_of_another_subject(reg: Registry) -> None:
    reg.register("address", ADDRESS)
    sv = reg.register("person-value", PERSON, references=PERSON_REFS)
    assert sv.schema.references == (Reference("com.example.Address", "address", 1),)
    assert json.loads(sv.schema.schema)["fields"][1]["type"] == "com.example.Address"
    parsed = reg.state.parsed(sv.schema).parsed
    assert parsed.fields[1].type.fullname == "com.example.Address"
    assert reg.state.referenced_by("address", 1) == [sv.schema.id]


def test_a_schema_without_its_reference_is_invalid(reg: Registry) -> None:
    with pytest.raises(InvalidSchemaError):
        reg.register("person-value", PERSON)
    with pytest.raises(InvalidSchemaError):
        reg.register("person-value", PERSON, references=PERSON_REFS)  # no such subject


def test_a_referenced_version_cannot_be_deleted(reg: Registry) -> None:
    reg.register("address", ADDRESS)
    reg.register("person-value", PERSON, references=PERSON_REFS)
    with pytest.raises(SchemaReferencedError) as e:
        reg.delete_version("address", 1)
    assert e.value.code == 42206
    with pytest.raises(SchemaReferencedError):
        reg.delete_subject("address")


def test_a_reference_deleted_with_its_user_frees_the_version(reg: Registry) -> None:
    reg.register("address", ADDRESS)
    reg.register("person-value", PERSON, references=PERSON_REFS)
    reg.delete_subject("person-value")
    assert reg.delete_version("address", 1) == 1


def test_references_survive_replay(reg: Registry) -> None:
    reg.register("address", ADDRESS)
    sv = reg.register("person-value", PERSON, references=PERSON_REFS)
    state = reg.replay()
    again = state.latest("person-value")
    assert again.schema == sv.schema
    assert state.parsed(again.schema).identity == reg.parse(PERSON, None, PERSON_REFS).identity


def test_a_version_number_must_be_valid(reg: Registry) -> None:
    reg.register("a-value", USER)
    for bad in ("0", "abc", "-2", 2**31):
        with pytest.raises(InvalidVersionError):
            reg.state.version("a-value", bad)
    assert reg.state.version("a-value", "latest").version == 1
    assert reg.state.version("a-value", -1).version == 1
