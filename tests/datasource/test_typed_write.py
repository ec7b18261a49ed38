"""df.write/writeStream.format("sparklog") with valueFormat=avro: a struct column written as
registry-framed Avro, read back by confluent-kafka's own ``AvroDeserializer`` (what any
Kafka application reads it with) and by a typed ``format("sparklog")`` read."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

import sparklog.spark
from sparklog.errors import OptionError
from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerProcess

pytestmark = pytest.mark.spark

ORDER = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}  # fmt: skip


def topic(broker: BrokerProcess, name: str) -> str:
    with KafkaClient(broker.bootstrap) as c:
        admin.create_topic(c, name, 1, {})
    return name


def orders(spark: Any, n: int = 3) -> Any:
    rows = [(i, f"item-{i}") for i in range(n)]
    return spark.createDataFrame(rows, "id long, item string").selectExpr(
        "CAST(id AS STRING) AS key", "struct(id, item) AS value"
    )


def consume(broker: BrokerProcess, name: str, n: int, registry: SchemaRegistryClient) -> list[Any]:
    """``n`` values of ``name``, deserialised by confluent-kafka's AvroDeserializer."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{name}",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([name])
    de = AvroDeserializer(registry)
    out: list[Any] = []
    try:
        for _ in range(200):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                ctx = SerializationContext(name, MessageField.VALUE, m.headers())
                out.append(de(m.value(), ctx))
            if len(out) >= n:
                break
    finally:
        c.close()
    return out


def write(df: Any, broker: BrokerProcess, name: str, **options: str) -> None:
    w = df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
    w.option("topic", name).options(**options).save()


def test_a_struct_is_written_as_registry_framed_avro_with_a_registered_schema(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    sparklog.spark.register(spark)
    name = topic(broker, "w-auto")
    # no schemaRegistryUrl: the sink asks the broker where its registry is
    write(orders(spark), broker, name, valueFormat="avro", autoRegisterSchemas="true")
    latest = registry.get_latest_version(f"{name}-value")
    assert json.loads(latest.schema.schema_str)["name"] == "topLevelRecord"  # as to_avro
    got = consume(broker, name, 3, registry)
    assert sorted(got, key=lambda v: v["id"]) == [
        {"id": i, "item": f"item-{i}"} for i in range(3)
    ]  # fmt: skip


def test_without_auto_registration_the_subjects_schema_is_used(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    sparklog.spark.register(spark)
    name = topic(broker, "w-given")
    sid = registry.register_schema(f"{name}-value", Schema(json.dumps(ORDER), "AVRO"))
    write(orders(spark), broker, name, valueFormat="avro", schemaRegistryUrl=broker.registry_url)
    assert registry.get_latest_version(f"{name}-value").version == 1  # nothing registered
    got = consume(broker, name, 3, registry)
    assert {v["id"] for v in got} == {0, 1, 2}
    df = (spark.read.format("sparklog").option("subscribe", name)
          .option("valueFormat", "avro").load(broker.data_dir))  # fmt: skip
    assert {(r["value"]["id"], r["valueSchemaId"]) for r in df.collect()} == {
        (0, sid), (1, sid), (2, sid)
    }  # fmt: skip


def test_a_column_that_does_not_match_the_subject_is_refused_by_name(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    sparklog.spark.register(spark)
    name = topic(broker, "w-misfit")
    registry.register_schema(f"{name}-value", Schema(json.dumps(ORDER), "AVRO"))
    df = spark.createDataFrame([(1, 2.5)], "id long, price double").selectExpr(
        "struct(id, price) AS value"
    )
    with pytest.raises(OptionError, match="field item of subject 'w-misfit-value' version 1"):
        write(df, broker, name, valueFormat="avro")


def test_an_incompatible_auto_registration_is_refused_with_the_registrys_reason(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient
) -> None:
    sparklog.spark.register(spark)
    name = topic(broker, "w-409")
    write(orders(spark), broker, name, valueFormat="avro", autoRegisterSchemas="true")
    # a new required field without a default: not BACKWARD compatible
    df = spark.createDataFrame([((1, "x", 2),)],
                               "value struct<id:bigint,item:string,qty:int not null>")  # fmt: skip
    with pytest.raises(OptionError, match=r"registering .*incompatible.*\(error 409\)"):
        write(df, broker, name, valueFormat="avro", autoRegisterSchemas="true")
    assert registry.get_latest_version(f"{name}-value").version == 1


def test_wrong_typed_write_options_are_refused(spark: Any, broker: BrokerProcess) -> None:
    sparklog.spark.register(spark)
    df = orders(spark)
    with pytest.raises(OptionError, match="the sparklog sink writes avro, not json"):
        write(df, broker, "w-any", valueFormat="json")
    with pytest.raises(OptionError, match="unknown option"):
        write(df, broker, "w-any", valueFormat="avro", decodeIn="jvm")
    with pytest.raises(OptionError, match="column 'value' must be string or binary"):
        write(df, broker, "w-any")  # a struct without valueFormat=avro
    with pytest.raises(OptionError, match="needs the option valueSubject"):
        w = df.selectExpr("'w-any' AS topic", "value").write.format("sparklog")
        w.option("kafka.bootstrap.servers", broker.bootstrap).option("valueFormat", "avro").save()


def test_a_stream_writes_typed_values_exactly_once(
    spark: Any, broker: BrokerProcess, registry: SchemaRegistryClient, tmp_path: Path
) -> None:
    sparklog.spark.register(spark)
    name = topic(broker, "w-stream")
    source = topic(broker, "w-stream-src")
    write(orders(spark, 5).selectExpr("key", "CAST(value.item AS STRING) AS value"), broker,
          source)  # fmt: skip
    stream = (
        spark.readStream.format("sparklog").option("subscribe", source)
        .option("startingOffsets", "earliest").load(broker.data_dir)
        .selectExpr("key", "struct(CAST(value AS STRING) AS item, timestamp AS at) AS value")
    )  # fmt: skip
    q = (
        stream.writeStream.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", name).option("valueFormat", "avro")
        .option("autoRegisterSchemas", "true")
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination(120)
    assert q.exception() is None
    got = consume(broker, name, 5, registry)
    assert sorted(v["item"] for v in got) == [f"item-{i}" for i in range(5)]
    assert all(isinstance(v["at"], datetime.datetime) for v in got)  # timestamp-micros
