"""The broker's Schema Registry, driven by unchanged confluent-kafka clients
(``SchemaRegistryClient``, the Avro and JSON serializers, a real ``Producer`` and
``Consumer``) and by raw HTTP: every endpoint of the REST API and its error codes, the
content type, bad requests, restarts and HTTP basic authentication."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sparklog_testkit.processes import BrokerProcess

from .registry_helpers import CONTENT_TYPE, consume, http, produce, register
from .secure import write_security

USER = json.dumps({"type": "record", "name": "User", "namespace": "test",
                   "fields": [{"name": "name", "type": "string"}]})  # fmt: skip
USER_AGE = json.dumps({"type": "record", "name": "User", "namespace": "test",
                       "fields": [{"name": "name", "type": "string"},
                                  {"name": "age", "type": "int", "default": 0}]})  # fmt: skip
USER_NEEDS_AGE = json.dumps({"type": "record", "name": "User", "namespace": "test",
                             "fields": [{"name": "name", "type": "string"},
                                        {"name": "age", "type": "int"}]})  # fmt: skip
PERSON_JSON = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Person", "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
})  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module's tests (each uses subjects and topics of its own)."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("registry")), schema_registry=True).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


@pytest.fixture
def url(broker: BrokerProcess) -> str:
    return broker.registry_url


@pytest.fixture
def client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url})


def ctx(topic: str, field: str = MessageField.VALUE, headers: Any = None) -> SerializationContext:
    return SerializationContext(topic, field, headers)


# ---------------------------------------------------------------------------- clients


def test_avro_records_round_trip_through_the_broker(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = "avro-users"
    ser = AvroSerializer(client, USER)
    values = [ser({"name": n}, ctx(topic)) for n in ("ann", "bob")]
    assert produce(broker.bootstrap, topic, values) == [None, None]
    sid = client.get_latest_version(f"{topic}-value").schema_id
    de = AvroDeserializer(client)
    got = [m.value() for m in consume(broker.bootstrap, topic, 2)]
    assert all(v[:5] == b"\x00" + sid.to_bytes(4, "big") for v in got)
    assert [de(v, ctx(topic)) for v in got] == [{"name": "ann"}, {"name": "bob"}]


def test_a_fresh_deserializer_fetches_the_schema_by_id(
    broker: BrokerProcess, url: str, client: SchemaRegistryClient
) -> None:
    topic = "avro-fresh"
    value = AvroSerializer(client, USER_AGE)({"name": "cy", "age": 7}, ctx(topic))
    de = AvroDeserializer(SchemaRegistryClient({"url": url}))  # nothing cached
    assert de(value, ctx(topic)) == {"name": "cy", "age": 7}


def test_json_records_round_trip_through_the_broker(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = "json-people"
    ser = JSONSerializer(PERSON_JSON, client)
    value = ser({"name": "dee", "age": 41}, ctx(topic))
    assert produce(broker.bootstrap, topic, [value]) == [None]
    (m,) = consume(broker.bootstrap, topic, 1)
    de = JSONDeserializer(None, schema_registry_client=client)
    assert de(m.value(), ctx(topic)) == {"name": "dee", "age": 41}
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "JSON"


def test_a_schema_evolves_and_an_incompatible_change_is_409(
    client: SchemaRegistryClient,
) -> None:
    subject = "evolve-value"
    first = client.register_schema(subject, Schema(USER, "AVRO"))
    second = client.register_schema(subject, Schema(USER_AGE, "AVRO"))
    assert second == first + 1
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema("evolve-value", Schema(json.dumps(
            {"type": "record", "name": "User", "namespace": "test",
             "fields": [{"name": "name", "type": "int"}]}), "AVRO"))  # fmt: skip
    assert (e.value.http_status_code, e.value.error_code) == (409, 409)
    assert client.get_versions(subject) == [1, 2]


LEVEL_CASES = {
    # level: (schemas registered in turn, the last one is refused?)
    "BACKWARD": ([USER, USER_NEEDS_AGE], True),
    "BACKWARD_TRANSITIVE": ([USER, USER_AGE, USER_NEEDS_AGE], True),
    "FORWARD": ([USER_NEEDS_AGE, USER], True),
    "FORWARD_TRANSITIVE": ([USER_NEEDS_AGE, USER_AGE, USER], True),
    "FULL": ([USER, USER_NEEDS_AGE], True),
    "FULL_TRANSITIVE": ([USER, USER_AGE, USER_NEEDS_AGE], True),
    "NONE": ([USER, USER_NEEDS_AGE], False),
}


@pytest.mark.parametrize("level", list(LEVEL_CASES))
def test_each_level_through_the_client(client: SchemaRegistryClient, level: str) -> None:
    subject = f"level-{level.lower()}-value"
    schemas, refused = LEVEL_CASES[level]
    assert client.set_compatibility(subject, level) == {"compatibility": level}
    for text in schemas[:-1]:
        client.register_schema(subject, Schema(text, "AVRO"))
    last = Schema(schemas[-1], "AVRO")
    assert client.test_compatibility_all_versions(subject, last) is not refused
    if refused:
        with pytest.raises(SchemaRegistryError) as e:
            client.register_schema(subject, last)
        assert e.value.http_status_code == 409
    else:
        client.register_schema(subject, last)
    assert len(client.get_versions(subject)) == len(schemas) - refused


def test_delete_and_register_again(client: SchemaRegistryClient) -> None:
    subject = "again-value"
    sid = client.register_schema(subject, Schema(USER, "AVRO"))
    client.register_schema(subject, Schema(USER_AGE, "AVRO"))
    assert client.delete_version(subject, 2) == 2
    assert client.delete_subject(subject) == [1]
    assert client.get_subjects().count(subject) == 0
    again = client.register_schema_full_response(subject, Schema(USER, "AVRO"))
    assert (again.schema_id, again.version) == (sid, 3)  # versions count on
    client.delete_subject(subject)
    assert client.delete_subject(subject, permanent=True) == [1, 2, 3]
    fresh = client.register_schema_full_response(subject, Schema(USER_AGE, "AVRO"))
    assert fresh.version == 1


def test_use_latest_version(client: SchemaRegistryClient) -> None:
    topic = "latest"
    client.register_schema(f"{topic}-value", Schema(USER, "AVRO"))
    latest = client.register_schema(f"{topic}-value", Schema(USER_AGE, "AVRO"))
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    ser = AvroSerializer(client, USER, conf=conf)
    value = ser({"name": "eve", "age": 3}, ctx(topic))
    assert value[1:5] == latest.to_bytes(4, "big")
    assert AvroDeserializer(client)(value, ctx(topic)) == {"name": "eve", "age": 3}


def test_schema_ids_in_headers_resolve_by_guid(
    broker: BrokerProcess, url: str, client: SchemaRegistryClient
) -> None:
    from confluent_kafka.schema_registry import header_schema_id_serializer

    topic = "headers"
    ser = AvroSerializer(client, USER, conf={"schema.id.serializer": header_schema_id_serializer})
    headers: list[tuple[str, bytes]] = []
    # a name long enough for more than 5 bytes: confluent-kafka's deserializer refuses
    # shorter data before it looks at the headers (2.16.1)
    value = ser({"name": "fay of the long name"}, ctx(topic, headers=headers))
    (name, guid_bytes), = headers  # fmt: skip
    assert name == "__value_schema_id" and len(guid_bytes) == 17 and guid_bytes[0] == 1
    assert produce(broker.bootstrap, topic, [value], headers=headers) == [None]
    (m,) = consume(broker.bootstrap, topic, 1)
    assert m.value() == value  # no prefix: the id is in the header
    fresh = SchemaRegistryClient({"url": url})  # the GUID is resolved by the registry
    got = AvroDeserializer(fresh)(m.value(), ctx(topic, headers=m.headers()))
    assert got == {"name": "fay of the long name"}
    import uuid

    guid = str(uuid.UUID(bytes=guid_bytes[1:]))
    assert (
        http(url, "GET", f"/schemas/guids/{guid}").body["schema"]
        == fresh.get_schema(client.get_latest_version(f"{topic}-value").schema_id).schema_str
    )


def test_references_through_the_client(client: SchemaRegistryClient) -> None:
    from confluent_kafka.schema_registry import SchemaReference

    address = json.dumps({"type": "record", "name": "Address", "namespace": "geo",
                          "fields": [{"name": "city", "type": "string"}]})  # fmt: skip
    client.register_schema("geo.Address", Schema(address, "AVRO"))
    person = json.dumps({"type": "record", "name": "Resident", "namespace": "geo",
                         "fields": [{"name": "home", "type": "geo.Address"}]})  # fmt: skip
    refs = [SchemaReference("geo.Address", "geo.Address", 1)]
    sid = client.register_schema("residents-value", Schema(person, "AVRO", refs))
    ser = AvroSerializer(client, Schema(person, "AVRO", refs),
                         conf={"auto.register.schemas": False,
                               "use.latest.version": True})  # fmt: skip
    value = ser({"home": {"city": "Oslo"}}, ctx("residents"))
    assert value[1:5] == sid.to_bytes(4, "big")
    assert AvroDeserializer(client)(value, ctx("residents")) == {"home": {"city": "Oslo"}}
    with pytest.raises(SchemaRegistryError) as e:
        client.delete_version("geo.Address", 1)
    assert e.value.error_code == 42206


# ---------------------------------------------------------------------------- REST API


def test_answers_have_the_registry_content_type(url: str) -> None:
    a = http(url, "GET", "/schemas/types")
    assert a.status == 200 and a.headers["Content-Type"].startswith(CONTENT_TYPE)
    assert a.body == ["AVRO", "JSON"]
    missing = http(url, "GET", "/subjects/nobody/versions")
    assert missing.headers["Content-Type"].startswith(CONTENT_TYPE)


def test_root_and_contexts(url: str) -> None:
    assert http(url, "GET", "/").body == {}
    assert http(url, "GET", "/contexts").body == ["."]


def test_register_answers_id_version_and_guid(url: str) -> None:
    a = register(url, "rest-reg-value", USER)
    assert a.status == 200
    body = a.body
    assert body["subject"] == "rest-reg-value" and body["version"] == 1
    assert isinstance(body["id"], int) and len(body["guid"]) == 36
    assert json.loads(body["schema"]) == json.loads(USER)


def test_plain_json_requests_are_accepted(url: str) -> None:
    a = http(url, "POST", "/subjects/rest-plain-value/versions", {"schema": USER},
             content_type="application/json")  # fmt: skip
    assert a.status == 200


def test_unknown_request_fields_are_accepted(url: str) -> None:
    a = register(url, "rest-extra-value", USER, metadata={"properties": {"owner": "me"}},
                 ruleSet={"domainRules": []}, normalize=True, somethingNew=1)  # fmt: skip
    assert a.status == 200, a.raw


def test_an_invalid_schema_is_42201(url: str) -> None:
    for schema in ("{not json", '{"type": "strin"}', ""):
        a = register(url, "rest-bad-value", schema)
        assert (a.status, a.code) == (422, 42201), schema
    a = register(url, "rest-bad-value", "{}", schemaType="PROTOBUF")
    assert a.code == 42201
    a = http(url, "POST", "/subjects/rest-bad-value/versions", {"schemaa": USER})
    assert a.code == 42201


def test_a_malformed_body_is_400_and_the_broker_keeps_serving(
    broker: BrokerProcess, url: str
) -> None:
    for raw in (b"{", b"\xff\xfe", b"[1, 2"):
        a = http(url, "POST", "/subjects/rest-malformed-value/versions", raw=raw)
        assert 400 <= a.status < 500 and a.code in (400, 42201), a.raw
    for body in ([1, 2], "just a string", 42, None):
        a = http(url, "PUT", "/config", raw=json.dumps(body).encode())
        assert 400 <= a.status < 500, a.raw
    assert register(url, "rest-malformed-value", USER).status == 200
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert "_schemas" in md.topics
    assert produce(broker.bootstrap, "after-malformed", [b"x"]) == [None]


def test_unknown_paths_and_methods(url: str) -> None:
    a = http(url, "GET", "/no/such/thing")
    assert (a.status, a.code) == (404, 404)
    a = http(url, "PATCH", "/subjects")
    assert (a.status, a.code) == (405, 405)


def test_list_subjects(url: str) -> None:
    register(url, "list-a-value", USER)
    register(url, "list-b-value", USER)
    http(url, "DELETE", "/subjects/list-b-value")
    assert http(url, "GET", "/subjects?subjectPrefix=list-").body == ["list-a-value"]
    assert http(url, "GET", "/subjects?subjectPrefix=list-&deleted=true").body == [
        "list-a-value", "list-b-value"
    ]  # fmt: skip


def test_lookup_under_a_subject(url: str) -> None:
    sid = register(url, "look-value", USER).body["id"]
    spelt = json.dumps(json.loads(USER), indent=4)
    a = http(url, "POST", "/subjects/look-value", {"schema": spelt})
    assert a.status == 200
    assert (a.body["id"], a.body["version"], a.body["subject"]) == (sid, 1, "look-value")
    a = http(url, "POST", "/subjects/look-value", {"schema": USER_AGE})
    assert (a.status, a.code) == (404, 40403)
    a = http(url, "POST", "/subjects/look-nobody", {"schema": USER})
    assert (a.status, a.code) == (404, 40401)


def test_lookup_of_a_soft_deleted_version(url: str) -> None:
    register(url, "look-del-value", USER)
    register(url, "look-del-value", USER_AGE)
    http(url, "DELETE", "/subjects/look-del-value/versions/1")
    assert http(url, "POST", "/subjects/look-del-value", {"schema": USER}).code == 40403
    a = http(url, "POST", "/subjects/look-del-value?deleted=true", {"schema": USER})
    assert a.status == 200 and a.body["version"] == 1 and a.body["deleted"] is True


def test_versions_of_a_subject(url: str) -> None:
    register(url, "vers-value", USER)
    register(url, "vers-value", USER_AGE)
    assert http(url, "GET", "/subjects/vers-value/versions").body == [1, 2]
    latest = http(url, "GET", "/subjects/vers-value/versions/latest").body
    assert latest["version"] == 2 and latest["subject"] == "vers-value"
    assert http(url, "GET", "/subjects/vers-value/versions/-1").body == latest
    a = http(url, "GET", "/subjects/vers-value/versions/1/schema")
    assert json.loads(a.raw) == json.loads(USER)
    assert http(url, "GET", "/subjects/vers-value/versions/3").code == 40402
    assert http(url, "GET", "/subjects/vers-value/versions/abc").code == 42202
    assert http(url, "GET", "/subjects/vers-value/versions/0").code == 42202
    assert http(url, "GET", "/subjects/vers-nobody/versions").code == 40401
    assert http(url, "GET", "/subjects/vers-nobody/versions/1").code == 40401


def test_delete_a_version_soft_then_permanently(url: str) -> None:
    register(url, "delv-value", USER)
    register(url, "delv-value", USER_AGE)
    a = http(url, "DELETE", "/subjects/delv-value/versions/2?permanent=true")
    assert (a.status, a.code) == (404, 40407)
    assert http(url, "DELETE", "/subjects/delv-value/versions/2").body == 2
    assert http(url, "GET", "/subjects/delv-value/versions").body == [1]
    assert http(url, "GET", "/subjects/delv-value/versions?deleted=true").body == [1, 2]
    assert http(url, "GET", "/subjects/delv-value/versions/2?deleted=true").body["deleted"]
    assert http(url, "DELETE", "/subjects/delv-value/versions/2").code == 40402
    assert http(url, "DELETE", "/subjects/delv-value/versions/2?permanent=true").body == 2
    assert http(url, "GET", "/subjects/delv-value/versions?deleted=true").body == [1]


def test_delete_a_subject_soft_then_permanently(url: str) -> None:
    # a schema no other test registers: a permanent delete frees an id no subject uses
    only_here = json.dumps({"type": "record", "name": "Deleted", "fields": []})
    sid = register(url, "dels-value", only_here).body["id"]
    a = http(url, "DELETE", "/subjects/dels-value?permanent=true")
    assert (a.status, a.code) == (404, 40405)
    assert http(url, "DELETE", "/subjects/dels-value").body == [1]
    assert http(url, "GET", f"/schemas/ids/{sid}").status == 200  # soft: still served
    assert http(url, "DELETE", "/subjects/dels-value").code == 40401
    assert http(url, "DELETE", "/subjects/dels-value?permanent=true").body == [1]
    assert http(url, "DELETE", "/subjects/dels-value?permanent=true").code == 40401
    assert http(url, "GET", f"/schemas/ids/{sid}").code == 40403


def test_schemas_by_id(url: str) -> None:
    # a schema no other test registers, so that exactly these two subjects use its id
    person = json.dumps({**json.loads(PERSON_JSON), "title": "PersonById"})
    body = register(url, "byid-a-value", person, schemaType="JSON").body
    register(url, "byid-b-value", person, schemaType="JSON")
    sid, guid = body["id"], body["guid"]
    a = http(url, "GET", f"/schemas/ids/{sid}").body
    assert a["schemaType"] == "JSON" and a["guid"] == guid
    assert json.loads(a["schema"]) == json.loads(person)
    assert json.loads(http(url, "GET", f"/schemas/ids/{sid}/schema").raw) == json.loads(person)
    assert http(url, "GET", f"/schemas/ids/{sid}/subjects").body == [
        "byid-a-value", "byid-b-value"
    ]  # fmt: skip
    assert http(url, "GET", f"/schemas/ids/{sid}/versions").body == [
        {"subject": "byid-a-value", "version": 1}, {"subject": "byid-b-value", "version": 1}
    ]  # fmt: skip
    assert http(url, "GET", f"/schemas/guids/{guid}").body["id"] == sid
    assert http(url, "GET", f"/schemas/guids/{guid.upper()}").body["id"] == sid
    for path in ("/schemas/ids/999999", "/schemas/ids/abc", "/schemas/ids/999999/subjects",
                 "/schemas/guids/00000000-0000-0000-0000-000000000000"):  # fmt: skip
        assert http(url, "GET", path).code == 40403, path


def test_schemas_listing(url: str) -> None:
    register(url, "listing-value", USER)
    register(url, "listing-value", USER_AGE)
    every = http(url, "GET", "/schemas?subjectPrefix=listing-").body
    assert [(s["subject"], s["version"]) for s in every] == [
        ("listing-value", 1), ("listing-value", 2)
    ]  # fmt: skip
    latest = http(url, "GET", "/schemas?subjectPrefix=listing-&latestOnly=true").body
    assert [(s["subject"], s["version"]) for s in latest] == [("listing-value", 2)]


def test_referenced_by(url: str) -> None:
    address = json.dumps({"type": "record", "name": "Addr", "namespace": "rest",
                          "fields": [{"name": "street", "type": "string"}]})  # fmt: skip
    register(url, "rest-addr", address)
    user = json.dumps({"type": "record", "name": "Owner", "namespace": "rest",
                       "fields": [{"name": "at", "type": "rest.Addr"}]})  # fmt: skip
    refs = [{"name": "rest.Addr", "subject": "rest-addr", "version": 1}]
    a = register(url, "rest-owner-value", user, references=refs)
    assert a.status == 200, a.raw
    assert a.body["references"] == refs
    assert http(url, "GET", "/subjects/rest-addr/versions/1/referencedby").body == [a.body["id"]]
    d = http(url, "DELETE", "/subjects/rest-addr/versions/1")
    assert (d.status, d.code) == (422, 42206)
    assert http(url, "DELETE", "/subjects/rest-addr").code == 42206
    missing = register(
        url,
        "rest-owner2-value",
        user,
        references=[{"name": "rest.Addr", "subject": "rest-addr", "version": 9}],
    )
    assert missing.code == 42201


def test_compatibility_endpoints(url: str) -> None:
    register(url, "compat-value", USER)
    register(url, "compat-value", USER_AGE)
    path = "/compatibility/subjects/compat-value/versions"
    ok = http(url, "POST", f"{path}/latest", {"schema": USER_NEEDS_AGE})
    assert ok.body == {"is_compatible": True}  # reads version 2's data
    bad = http(url, "POST", f"{path}/1?verbose=true", {"schema": USER_NEEDS_AGE}).body
    assert bad["is_compatible"] is False and bad["messages"]
    assert any("age" in m for m in bad["messages"])
    assert http(url, "POST", path, {"schema": USER_NEEDS_AGE}).body == {"is_compatible": True}
    http(url, "PUT", "/config/compat-value", {"compatibility": "BACKWARD_TRANSITIVE"})
    every = http(url, "POST", f"{path}?verbose=true", {"schema": USER_NEEDS_AGE}).body
    assert every["is_compatible"] is False and every["messages"]
    assert http(url, "POST", f"{path}/7", {"schema": USER}).code == 40402
    assert http(url, "POST", f"{path}/latest", {"schema": "{"}).code == 42201


def test_compatibility_with_a_missing_subject_is_true(url: str) -> None:
    for path in ("/compatibility/subjects/compat-nobody/versions",
                 "/compatibility/subjects/compat-nobody/versions/latest"):  # fmt: skip
        a = http(url, "POST", path, {"schema": USER})
        assert a.body == {"is_compatible": True}, path


def test_a_refused_registration_explains_why(url: str) -> None:
    register(url, "why-value", USER)
    a = register(url, "why-value", USER_NEEDS_AGE)
    assert (a.status, a.code) == (409, 409)
    assert "age" in a.body["message"]


def test_config_global_and_per_subject(url: str) -> None:
    assert http(url, "GET", "/config").body == {"compatibilityLevel": "BACKWARD"}
    a = http(url, "PUT", "/config/cfg-value", {"compatibility": "full"})
    assert a.body == {"compatibility": "FULL"}
    assert http(url, "GET", "/config/cfg-value").body == {"compatibilityLevel": "FULL"}
    assert http(url, "GET", "/config/cfg-other").code == 40408
    assert http(url, "GET", "/config/cfg-other?defaultToGlobal=true").body == {
        "compatibilityLevel": "BACKWARD"
    }  # fmt: skip
    assert http(url, "PUT", "/config/cfg-value", {"compatibility": "SIDEWAYS"}).code == 42203
    assert http(url, "DELETE", "/config/cfg-value").body == {"compatibilityLevel": "FULL"}
    assert http(url, "GET", "/config/cfg-value").code == 40408


def test_global_config_changes_the_default(url: str) -> None:
    try:
        assert http(url, "PUT", "/config", {"compatibility": "NONE"}).status == 200
        assert http(url, "GET", "/config/gcfg-value?defaultToGlobal=true").body == {
            "compatibilityLevel": "NONE"
        }  # fmt: skip
        register(url, "gcfg-value", USER)
        assert register(url, "gcfg-value", USER_NEEDS_AGE).status == 200
    finally:
        http(url, "DELETE", "/config")
    assert http(url, "GET", "/config").body == {"compatibilityLevel": "BACKWARD"}


def test_modes(url: str) -> None:
    assert http(url, "GET", "/mode").body == {"mode": "READWRITE"}
    register(url, "mode-value", USER)
    assert http(url, "PUT", "/mode/mode-value", {"mode": "READONLY"}).body == {
        "mode": "READONLY"
    }  # fmt: skip
    assert http(url, "GET", "/mode/mode-value").body == {"mode": "READONLY"}
    a = register(url, "mode-value", USER_AGE)
    assert (a.status, a.code) == (422, 42205)
    assert http(url, "DELETE", "/subjects/mode-value").code == 42205
    assert http(url, "GET", "/subjects/mode-value/versions/1").status == 200  # reads go on
    assert http(url, "PUT", "/mode/mode-value", {"mode": "SOMETIMES"}).code == 42204
    assert http(url, "DELETE", "/mode/mode-value").body == {"mode": "READONLY"}
    assert http(url, "GET", "/mode/mode-value").code == 40409
    assert register(url, "mode-value", USER_AGE).status == 200


def test_import_mode_takes_ids_and_versions(url: str) -> None:
    subject = "import-value"
    assert http(url, "PUT", f"/mode/{subject}", {"mode": "IMPORT"}).status == 200
    a = register(url, subject, json.dumps({"type": "fixed", "name": "Imp", "size": 3}),
                 id=5000, version=4)  # fmt: skip
    assert (a.body["id"], a.body["version"]) == (5000, 4), a.raw
    http(url, "DELETE", f"/mode/{subject}")
    assert register(url, "import-next-value", '"long"').body["id"] == 5001
    a = http(url, "PUT", "/mode/import-next-value", {"mode": "IMPORT"})
    assert (a.status, a.code) == (422, 42205)  # has versions: needs force
    assert http(url, "PUT", "/mode/import-next-value?force=true", {"mode": "IMPORT"}).status == 200


# ---------------------------------------------------------------------------- restarts


def test_ids_and_versions_survive_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(str(tmp_path / "data"), schema_registry=True).start()
    try:
        url = b.registry_url
        client = SchemaRegistryClient({"url": url})
        ids = [client.register_schema(f"r{i}-value", Schema(s, "AVRO"))
               for i, s in enumerate((USER, USER_AGE, USER))]  # fmt: skip
        client.register_schema("r0-value", Schema(USER_AGE, "AVRO"))
        client.set_compatibility("r1-value", "NONE")
        client.delete_subject("r2-value")
        value = AvroSerializer(client, USER_AGE)({"name": "gus", "age": 1}, ctx("r1"))
        guid = http(url, "GET", f"/schemas/ids/{ids[0]}").body["guid"]
        before = http(url, "GET", "/schemas?deleted=true").body
        assert b.stop() == 0
        b.restart()
        assert b.registry_url == url  # the same port
        assert http(url, "GET", "/schemas?deleted=true").body == before
        assert http(url, "GET", f"/schemas/guids/{guid}").body["id"] == ids[0]
        assert http(url, "GET", "/config/r1-value").body == {"compatibilityLevel": "NONE"}
        fresh = SchemaRegistryClient({"url": url})
        assert AvroDeserializer(fresh)(value, ctx("r1")) == {"name": "gus", "age": 1}
        new = fresh.register_schema("r3-value", Schema('"bytes"', "AVRO"))
        assert new == max(ids) + 1
    finally:
        b.stop()
        b.kill()


def test_ids_survive_a_sigkill(tmp_path: Path) -> None:
    b = BrokerProcess(str(tmp_path / "data"), schema_registry=True).start()
    try:
        sid = register(b.registry_url, "k-value", USER).body["id"]
        b.kill()
        b.restart()
        assert http(b.registry_url, "GET", f"/schemas/ids/{sid}").status == 200
        assert register(b.registry_url, "k2-value", USER_AGE).body["id"] == sid + 1
    finally:
        b.stop()
        b.kill()


def test_a_permanently_deleted_id_is_not_reused_after_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(str(tmp_path / "data"), schema_registry=True).start()
    try:
        url = b.registry_url
        register(url, "keep-value", USER)
        gone = register(url, "gone-value", USER_AGE).body["id"]
        http(url, "DELETE", "/subjects/gone-value")
        http(url, "DELETE", "/subjects/gone-value?permanent=true")
        b.stop()
        b.restart()
        assert register(url, "next-value", USER_NEEDS_AGE).body["id"] == gone + 1
    finally:
        b.stop()
        b.kill()


# ---------------------------------------------------------------------------- basic auth


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose registry needs HTTP basic auth; the authorizer is on and admin is
    a super user (alice and bob are not)."""
    where = tmp_path_factory.mktemp("registry-auth")
    data = str(where / "data")
    config = write_security(where, data)
    config.write_text(config.read_text() + '\n[broker]\nschema_registry_auth = "basic"\n')
    b = BrokerProcess(data, schema_registry=True, extra=("--config", str(config))).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


def test_basic_auth_refuses_a_request_without_credentials(secured: BrokerProcess) -> None:
    a = http(secured.registry_url, "GET", "/subjects")
    assert (a.status, a.code) == (401, 401)
    assert a.headers["WWW-Authenticate"].startswith("Basic")


@pytest.mark.parametrize("creds", ["admin:wrong", "nobody:admin-secret", "admin", ":"])
def test_basic_auth_refuses_wrong_credentials(secured: BrokerProcess, creds: str) -> None:
    assert http(secured.registry_url, "GET", "/subjects", auth=creds).status == 401


def test_basic_auth_refuses_a_malformed_header(secured: BrokerProcess) -> None:
    import urllib.request

    req = urllib.request.Request(secured.registry_url + "/subjects")
    req.add_header("Authorization", "Basic !!!not-base64")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 401


def test_the_client_authenticates_with_basic_auth_user_info(secured: BrokerProcess) -> None:
    client = SchemaRegistryClient({"url": secured.registry_url,
                                   "basic.auth.user.info": "admin:admin-secret"})  # fmt: skip
    sid = client.register_schema("auth-value", Schema(USER, "AVRO"))
    assert client.get_schema(sid).schema_str
    ser = AvroSerializer(client, USER)
    value = ser({"name": "hal"}, ctx("auth"))
    assert AvroDeserializer(client)(value, ctx("auth")) == {"name": "hal"}
    wrong = SchemaRegistryClient({"url": secured.registry_url,
                                  "basic.auth.user.info": "admin:nope"})  # fmt: skip
    with pytest.raises(SchemaRegistryError) as e:
        wrong.get_subjects()
    assert e.value.http_status_code == 401


def test_a_user_reads_but_changes_only_with_an_acl(secured: BrokerProcess) -> None:
    url = secured.registry_url
    register(url, "acl-value", USER, auth="admin:admin-secret")
    assert http(url, "GET", "/subjects/acl-value/versions", auth="alice:alice-secret").body == [1]
    a = register(url, "acl-value", USER_AGE, auth="alice:alice-secret")
    assert (a.status, a.code) == (403, 40301)
    a = http(url, "PUT", "/config", {"compatibility": "NONE"}, auth="bob:bob-secret")
    assert a.status == 403
