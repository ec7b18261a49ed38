"""Broker-side schema validation (``confluent.value.schema.validation`` and
``confluent.key.schema.validation``, Confluent Server's topic configs): a real broker with
its registry, records produced by confluent-kafka with and without its serializers.

A refused record is answered INVALID_RECORD and nothing of its batch is written; the
broker goes on serving.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sparklog_testkit.processes import BrokerProcess
from tests.broker.registry_helpers import consume, end_offset, produce, register

USER = json.dumps({"type": "record", "name": "User", "namespace": "test",
                   "fields": [{"name": "name", "type": "string"}]})  # fmt: skip
OTHER = json.dumps({"type": "record", "name": "Other", "namespace": "test",
                    "fields": [{"name": "n", "type": "long"}]})  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("validation")), schema_registry=True).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.registry_url})


def create(broker: BrokerProcess, topic: str, **configs: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        f.result(30)
    return topic


def validated(broker: BrokerProcess, topic: str) -> str:
    return create(broker, topic, **{"confluent.value.schema.validation": "true"})


def serializer(client: SchemaRegistryClient, schema: str = USER, **conf: Any) -> Any:
    ser = AvroSerializer(client, schema, conf=conf or None)

    def serialize(topic: str, record: Any, headers: list[Any] | None = None) -> bytes:
        return ser(record, SerializationContext(topic, MessageField.VALUE, headers))

    return serialize


def refused(errors: list[KafkaError | None]) -> list[bool]:
    return [e is not None and e.code() == KafkaError.INVALID_RECORD for e in errors]


def test_records_of_the_topics_subject_are_taken(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = validated(broker, "valid-users")
    ser = serializer(client)
    values = [ser(topic, {"name": "ann"}), None, ser(topic, {"name": "bob"})]  # None: tombstone
    assert produce(broker.bootstrap, topic, values) == [None, None, None]
    assert [m.value() for m in consume(broker.bootstrap, topic, 3)] == values


def test_records_without_a_registered_id_are_refused_and_not_written(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = validated(broker, "refusing")
    ok = serializer(client)(topic, {"name": "ann"})
    other_subject = serializer(client, OTHER)("elsewhere", {"n": 1})  # elsewhere-value's id
    unknown_id = b"\x00\x00\x00\x7f\xff" + ok[5:]
    errors = produce(broker.bootstrap, topic,
                     [b"plain bytes", unknown_id, other_subject, b"\x00\x01", ok])  # fmt: skip
    assert refused(errors) == [True, True, True, True, False]
    assert end_offset(broker.bootstrap, topic) == 1  # only the good record
    assert [m.value() for m in consume(broker.bootstrap, topic, 1)] == [ok]


def test_a_batch_with_one_bad_record_is_refused_whole(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = validated(broker, "whole-batches")
    ok = serializer(client)(topic, {"name": "ann"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 500, "retries": 0,
                  "enable.idempotence": False})  # fmt: skip
    errors: list[Any] = []
    for v in (ok, b"not framed", ok):  # one request, one batch
        p.produce(topic, v, on_delivery=lambda e, _m: errors.append(e))
    p.flush(30)
    assert refused(errors) == [True, True, True]
    assert end_offset(broker.bootstrap, topic) == 0
    assert produce(broker.bootstrap, topic, [ok]) == [None]  # and the broker goes on


def test_a_schema_id_in_a_header_is_checked_too(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = validated(broker, "header-ids")
    ser = serializer(client, **{"schema.id.serializer": header_schema_id_serializer})
    headers: list[tuple[str, bytes]] = []
    value = ser(topic, {"name": "a name long enough"}, headers)
    assert produce(broker.bootstrap, topic, [value], headers=headers) == [None]
    bad = [("__value_schema_id", b"\x01" + b"\xab" * 16)]  # a GUID no schema has
    assert refused(produce(broker.bootstrap, topic, [value], headers=bad)) == [True]


def test_a_schema_registered_after_the_broker_looked_is_found(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = validated(broker, "late-schema")
    first = serializer(client)(topic, {"name": "ann"})
    assert produce(broker.bootstrap, topic, [first]) == [None]
    fields = [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]
    newer = json.dumps({**json.loads(USER), "fields": fields})
    sid = register(broker.registry_url, f"{topic}-value", newer).body["id"]
    value = b"\x00" + sid.to_bytes(4, "big") + first[5:] + b"\x00"
    assert produce(broker.bootstrap, topic, [value]) == [None]


def test_keys_are_validated_with_their_own_config(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = create(broker, "key-checked", **{"confluent.key.schema.validation": "true"})
    ser = AvroSerializer(client, USER)
    key = ser({"name": "k"}, SerializationContext(topic, MessageField.KEY))
    assert produce(broker.bootstrap, topic, [b"any value"], key=key) == [None]
    assert refused(produce(broker.bootstrap, topic, [b"any value"], key=b"raw key")) == [True]
    # the value is not checked: only the key's config is on
    assert produce(broker.bootstrap, topic, [b"\x00junk"], key=key) == [None]


def test_record_name_strategy_names_the_subject_after_the_record(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    topic = create(broker, "by-record", **{
        "confluent.value.schema.validation": "true",
        "confluent.value.subject.name.strategy":
            "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    })  # fmt: skip
    from confluent_kafka.schema_registry import record_subject_name_strategy

    conf = {"subject.name.strategy": record_subject_name_strategy}
    ok = serializer(client, **conf)(topic, {"name": "ann"})  # registers test.User
    assert client.get_latest_version("test.User").version == 1
    assert produce(broker.bootstrap, topic, [ok]) == [None]
    under_topic = serializer(client, OTHER)(topic, {"n": 1})  # registered as by-record-value
    assert refused(produce(broker.bootstrap, topic, [under_topic])) == [True]


def test_validation_is_a_topic_config_kafka_tools_can_change(
    broker: BrokerProcess, client: SchemaRegistryClient
) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = create(broker, "switched")
    assert produce(broker.bootstrap, topic, [b"raw"]) == [None]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("confluent.value.schema.validation", "true",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    res = ConfigResource("topic", topic, incremental_configs=[entry])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    assert refused(produce(broker.bootstrap, topic, [b"raw"])) == [True]
