"""spark.read/readStream.format("sparklog") with valueFormat avro|json: typed columns
decoded with the Schema Registry's schemas, and ``from_registry`` (the JVM path).

Records are produced by confluent-kafka's own serializers (``AvroSerializer``,
``JSONSerializer``) against the broker's registry, as any Kafka application writes them.
"""

from __future__ import annotations

import datetime
import decimal
import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer

import sparklog.spark
from sparklog.errors import OptionError
from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog.schemas.spark import avro_in_jvm
from sparklog_testkit.processes import BrokerProcess

from ..support.schemas import ALL_TYPES, V1, V2
from .typed import avro, produce, read, rows

pytestmark = pytest.mark.spark


def test_every_record_is_read_with_its_version_and_defaults_filled(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    produce(broker, "orders", avro(registry, V1), [{"id": 1, "item": "tea"}])
    produce(broker, "orders", avro(registry, V2),
            [{"id": 2, "item": "cake", "qty": 3, "note": "warm"}, None])  # fmt: skip
    df = read(spark, broker, "orders", valueFormat="avro", schemaRegistryUrl=broker.registry_url)
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,item:string,qty:int,note:string>"
    )
    v1 = registry.get_latest_version("orders-value").schema_id - 1
    got = [(r["value"], r["valueSchemaId"]) for r in rows(df)]
    assert got == [
        ({"id": 1, "item": "tea", "qty": 1, "note": None}, v1),
        ({"id": 2, "item": "cake", "qty": 3, "note": "warm"}, v1 + 1),
        (None, None),  # a tombstone
    ]


def test_an_older_reader_version_drops_newer_fields(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    produce(broker, "old", avro(registry, V1), [{"id": 1, "item": "tea"}])
    produce(broker, "old", avro(registry, V2), [{"id": 2, "item": "jam", "qty": 2, "note": None}])
    df = read(spark, broker, "old", valueFormat="avro", valueSchemaVersion="1")
    assert [r["value"] for r in rows(df)] == [{"id": 1, "item": "tea"}, {"id": 2, "item": "jam"}]
    if avro_in_jvm(spark):
        assert _plan(df).count("from_avro(") == 2  # version 2 too is decoded in the JVM


def test_json_values_from_the_storage_roots_own_schemas(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    schema = {"type": "object", "properties": {
        "user": {"type": "string"}, "clicks": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "at": {"type": "string", "format": "date-time"},
    }}  # fmt: skip
    ser = JSONSerializer(json.dumps(schema), registry)
    docs = [{"user": "ann", "clicks": 3, "tags": ["a", "b"], "at": "2024-03-01T10:00:00Z"},
            {"user": "bob", "clicks": 1}]  # fmt: skip
    produce(broker, "clicks", ser, docs)
    df = read(spark, broker, "clicks", valueFormat="json")  # no URL: the _schemas topic
    assert df.schema["value"].dataType.simpleString() == (
        "struct<user:string,clicks:bigint,tags:array<string>,at:timestamp>"
    )
    assert [r["value"] for r in rows(df)] == [
        {"user": "ann", "clicks": 3, "tags": ["a", "b"],
         "at": datetime.datetime(2024, 3, 1, 10, 0)},
        {"user": "bob", "clicks": 1, "tags": None, "at": None},
    ]  # fmt: skip


def test_schema_guids_in_headers_name_the_writer_schema(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    ser = avro(registry, V1, **{"schema.id.serializer": header_schema_id_serializer})
    produce(broker, "guided", ser, [{"id": 5, "item": "pie"}])
    df = read(spark, broker, "guided", valueFormat="avro", schemaRegistryUrl=broker.registry_url)
    [row] = rows(df)
    assert row["value"] == {"id": 5, "item": "pie"}
    assert row["valueSchemaId"] == registry.get_latest_version("guided-value").schema_id


def test_undecodable_records_fail_naming_topic_partition_and_offset(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    produce(broker, "broken", avro(registry, V1), [{"id": 1, "item": "tea"}])
    produce(broker, "broken", None, [b"\x00\x00\x00\x03\xe7rest", b"plain text"])
    why = (
        r"broken-0 offset 1: cannot decode the value .*schema id 999 is not in the schema registry"
    )
    with pytest.raises(Exception, match=why):
        read(spark, broker, "broken", valueFormat="avro").collect()
    df = read(spark, broker, "broken", valueFormat="avro", failOnDecodeError="false")
    got = [(r["value"], r["valueDecodeError"]) for r in rows(df)]
    assert got[0] == ({"id": 1, "item": "tea"}, None)
    assert got[1][0] is None and "schema id 999 is not in the schema registry" in got[1][1]
    assert got[2][0] is None and "unknown magic byte 112" in got[2][1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "orders", "valueSubject": "x"}, "valueSubject needs valueFormat"),
        ({"subscribe": "orders,old", "valueFormat": "avro"}, "needs the option valueSubject"),
        ({"subscribePattern": "o.*", "keyFormat": "json"}, "needs the option keySubject"),
        ({"subscribe": "orders", "valueFormat": "protobuf"}, "must be one of binary, avro"),
        ({"subscribe": "orders", "valueFormat": "avro", "valueSchemaVersion": "0"},
         "must be a version >= 1"),
        ({"subscribe": "orders", "valueFormat": "avro", "valueSubject": "nope-value"},
         "subject 'nope-value'"),
        ({"subscribe": "orders", "valueFormat": "json"}, "valueFormat=json, but version"),
        ({"subscribe": "orders", "schemaRegistryUrl": "http://x"}, "needs valueFormat or"),
    ],
)  # fmt: skip
def test_wrong_typed_options_fail_where_the_query_is_defined(
    spark: Any, broker: BrokerProcess, options: dict[str, str], message: str
) -> None:
    sparklog.spark.register(spark)
    with KafkaClient(broker.bootstrap) as c:  # the topics exist: the typed options are wrong
        for topic in ("orders", "old"):
            if topic not in admin.list_topics(c):
                admin.create_topic(c, topic, 1, {})
    with pytest.raises(OptionError, match=message):
        spark.read.format("sparklog").options(**options).load(broker.data_dir)


def test_a_stream_goes_on_when_a_new_version_is_registered(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient, tmp_path: Path
) -> None:
    produce(broker, "live", avro(registry, V1), [{"id": 1, "item": "tea"}])
    sparklog.spark.register(spark)
    seen: list[dict[str, Any]] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.extend(rows(df))

    def start(**trigger: Any) -> Any:
        return (
            spark.readStream.format("sparklog").option("subscribe", "live")
            .option("startingOffsets", "earliest").option("valueFormat", "avro")
            .load(broker.data_dir).writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(**trigger).start()
        )  # fmt: skip

    q = start(processingTime="200 milliseconds")
    try:
        _wait(lambda: len(seen) == 1)
        produce(broker, "live", avro(registry, V2), [{"id": 2, "item": "jam", "qty": 4,
                                                      "note": None}])  # fmt: skip
        _wait(lambda: len(seen) == 2 or q.exception() is not None)
        assert q.exception() is None
    finally:
        q.stop()
    assert [r["value"] for r in seen] == [{"id": 1, "item": "tea"}, {"id": 2, "item": "jam"}]
    # started again, the query reads with the newest version (Spark may replay the last
    # micro-batch first, if stop() came before its commit was logged)
    produce(broker, "live", avro(registry, V2), [{"id": 3, "item": "pie", "qty": 5,
                                                  "note": "x"}])  # fmt: skip
    start(availableNow=True).awaitTermination(60)
    assert seen[-1]["value"] == {"id": 3, "item": "pie", "qty": 5, "note": "x"}


def _wait(done: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# ---------------------------------------------------------------------------- the JVM path

ALL_RECORD = {
    "b": True, "f": 1.5, "d": 2.5, "by": b"\x01", "fx": b"ab", "e": "B", "u": {"x": 4},
    "il": 7, "arr": ["a", None], "m": {"k": 1}, "dt": datetime.date(2024, 5, 6),
    "tsm": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.UTC),
    "tsu": datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.UTC),
    "dec": decimal.Decimal("12.34"), "tm": 1000, "uid": "9b2f4cde-52c2-4e55-b6a6-1d0a7e0a5b44",
    "rec": None,
}  # fmt: skip


@pytest.mark.jvm
def test_jvm_decoding_agrees_with_the_python_decoder(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    from sparklog.schemas.spark import from_registry

    produce(broker, "typed", avro(registry, ALL_TYPES),
            [ALL_RECORD, {**ALL_RECORD, "u": "s", "rec": {"x": 1}}])  # fmt: skip
    python = read(spark, broker, "typed", valueFormat="avro", decodeIn="python")
    jvm = read(spark, broker, "typed", valueFormat="avro", decodeIn="jvm")
    helper = from_registry(read(spark, broker, "typed"), subject="typed-value",
                           storage_path=broker.data_dir)  # fmt: skip
    assert "from_avro" in _plan(jvm) and "from_avro" not in _plan(python)
    for other in (jvm, helper):
        assert other.schema == python.schema  # Spark's own from_avro types it the same way
        assert rows(other) == rows(python)


TIMES = {
    "type": "record", "name": "Times", "fields": [
        {"name": "tmu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    ],
}  # fmt: skip


@pytest.mark.jvm
def test_times_and_local_timestamps_agree_with_sparks_from_avro(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    record = {"tmu": datetime.time(7, 8, 9, 123456),
              "lts": datetime.datetime(2024, 5, 6, 7, 8, 9, 123456),
              "ltm": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000)}  # fmt: skip
    produce(broker, "times", avro(registry, TIMES), [record])
    python = read(spark, broker, "times", valueFormat="avro", decodeIn="python")
    jvm = read(spark, broker, "times", valueFormat="avro", decodeIn="jvm")
    assert jvm.schema == python.schema
    assert [r["value"] for r in rows(jvm)] == [r["value"] for r in rows(python)] == [record]


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


@pytest.mark.jvm
def test_avro_is_decoded_in_the_jvm_by_default(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    produce(broker, "default-jvm", avro(registry, V1), [{"id": 1, "item": "tea"}])
    df = read(spark, broker, "default-jvm", valueFormat="avro")
    assert "from_avro" in _plan(df)
    assert [r["value"] for r in rows(df)] == [{"id": 1, "item": "tea"}]
    assert "__sparklog" not in ",".join(df.columns)  # the reader's hidden column is gone


@pytest.mark.jvm
@pytest.mark.parametrize("decode_in", ["jvm", "python"])
def test_a_payload_that_does_not_fit_its_schema_fails_naming_its_offset(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient, decode_in: str
) -> None:
    topic = f"misfit-{decode_in}"
    produce(broker, topic, avro(registry, V1), [{"id": 1, "item": "tea"}])
    sid = registry.get_latest_version(f"{topic}-value").schema_id
    truncated = b"\x00" + sid.to_bytes(4, "big") + b"\x02"  # id 1, then no item
    produce(broker, topic, None, [truncated, None])
    opts = {"valueFormat": "avro", "decodeIn": decode_in}
    with pytest.raises(Exception, match=f"{topic}-0 offset 1: cannot decode the value"):
        read(spark, broker, topic, **opts).collect()
    got = rows(read(spark, broker, topic, failOnDecodeError="false", **opts))
    assert [(r["value"], r["valueSchemaId"]) for r in got] == [
        ({"id": 1, "item": "tea"}, sid), (None, sid), (None, None)
    ]  # fmt: skip
    assert [r["valueDecodeError"] is None for r in got] == [True, False, True]
    assert f"schema id {sid}" in got[1]["valueDecodeError"]


@pytest.mark.jvm
def test_a_union_reader_schema_is_decoded_in_python(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    # Spark makes a union a struct of members, and PERMISSIVE from_avro makes an
    # undecodable payload a struct of nulls: the JVM could not tell them apart
    union = ["null", "string", "long"]
    produce(broker, "unions", avro(registry, union), ["a", 5])
    df = read(spark, broker, "unions", valueFormat="avro", decodeIn="jvm")
    assert "from_avro" not in _plan(df)
    assert [r["value"] for r in rows(df)] == [
        {"member0": "a", "member1": None}, {"member0": None, "member1": 5}
    ]  # fmt: skip


@pytest.mark.jvm
def test_from_registry_over_sparks_kafka_source(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    from sparklog.schemas.spark import from_registry

    produce(broker, "kafka-src", avro(registry, V1), [{"id": 1, "item": "tea"}])
    produce(broker, "kafka-src", avro(registry, V2),
            [{"id": 2, "item": "jam", "qty": 2, "note": "n"}])  # fmt: skip
    produce(broker, "kafka-src", None, [b"\x00\x00\x00\x03\xe7x"])
    kafka = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
    df = kafka.option("subscribe", "kafka-src").option("startingOffsets", "earliest").load()
    decoded = from_registry(df, subject="kafka-src-value", schema_registry_url=broker.registry_url,
                            fail_on_error=False)  # fmt: skip
    got = [(r["value"], r["valueDecodeError"]) for r in rows(decoded)]
    assert got[:2] == [({"id": 1, "item": "tea", "qty": 1, "note": None}, None),
                       ({"id": 2, "item": "jam", "qty": 2, "note": "n"}, None)]  # fmt: skip
    assert got[2][0] is None and "kafka-src-0 offset 2" in got[2][1] and "999" in got[2][1]
    with pytest.raises(Exception, match="schema id 999 is not a version of the subject"):
        from_registry(df, subject="kafka-src-value",
                      schema_registry_url=broker.registry_url).collect()  # fmt: skip
