"""Typed reads in the DataSource tests: records framed by Confluent's serializers through a
real broker and Schema Registry, read back by Spark."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

import sparklog.spark
from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerProcess


def produce(
    broker: BrokerProcess, topic: str, serializer: Any, records: list[Any], *,
    partitions: int = 1,
) -> None:  # fmt: skip
    """``records`` serialised by ``serializer`` (None: as they are, bytes) into ``topic``."""
    with KafkaClient(broker.bootstrap) as c:
        if topic not in admin.list_topics(c):
            admin.create_topic(c, topic, partitions, {})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for r in records:
        headers: list[tuple[str, bytes]] = []
        ctx = SerializationContext(topic, MessageField.VALUE, headers)
        value = r if serializer is None or r is None else serializer(r, ctx)
        p.produce(topic, value=value, headers=headers or None)
    assert p.flush(30) == 0


def avro(registry: SchemaRegistryClient, schema: Any, **conf: Any) -> AvroSerializer:
    return AvroSerializer(registry, json.dumps(schema), conf=conf or None)


def read(spark: Any, broker: BrokerProcess, topic: str, **options: str) -> Any:
    sparklog.spark.register(spark)
    r = spark.read.format("sparklog").option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(broker.data_dir)


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy("offset").collect()]
