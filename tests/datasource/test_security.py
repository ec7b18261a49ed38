"""format("sparklog") with Kafka's security options: accepted by the source and the sink,
carried to every broker call, and a read refused at planning when the broker says the
principal may not READ a topic (Spark reads segment files, which no broker guards)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sparklog.spark
from sparklog.datasource.options.reads import batch_options, stream_options
from sparklog.datasource.options.writes import write_options
from sparklog.errors import OptionError
from sparklog.kafka import admin
from sparklog.kafka import security_admin as sa
from sparklog.kafka.client import KafkaClient
from tests.kafka.secured import SecuredBroker, start_secured_broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
        'password="alice-pw";')  # fmt: skip
SECURE = {
    "kafka.bootstrap.servers": "h:1",
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.jaas.config": JAAS,
    "kafka.ssl.truststore.location": "/ca.pem",
    "kafka.ssl.truststore.type": "PEM",
}


def test_source_options_accept_security_options() -> None:
    b = batch_options({"path": "/d", "subscribe": "t", **SECURE})
    assert b.client is not None and b.client.sasl_username == "alice"
    assert b.client.ssl_cafile == "/ca.pem" and b.client.client_id == "sparklog-source"
    s = stream_options({"path": "/d", "subscribe": "t", "group": "g", **SECURE})
    assert s.client is not None and (s.client.security_protocol, s.client.sasl_mechanism) == (
        "SASL_SSL", "PLAIN"
    )  # fmt: skip
    assert batch_options({"path": "/d", "subscribe": "t"}).client is None


def test_sink_options_accept_security_options() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    w = write_options({**SECURE, "topic": "t"}, StructType([StructField("value", BinaryType())]))
    assert w.client.sasl_username == "alice" and w.client.tls
    assert w.client.with_bootstrap("leader:1").sasl_password == "alice-pw"


def test_bad_security_options_are_option_errors() -> None:
    with pytest.raises(OptionError, match="PEM"):
        batch_options({"path": "/d", "subscribe": "t", **SECURE,
                       "kafka.ssl.truststore.type": "JKS"})  # fmt: skip
    with pytest.raises(OptionError, match="user name and password"):
        stream_options({"path": "/d", "subscribe": "t", "kafka.bootstrap.servers": "h:1",
                        "kafka.security.protocol": "SASL_PLAINTEXT"})  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    b = start_secured_broker(tmp_path_factory.mktemp("secured-ds"))
    try:
        with KafkaClient(b.settings()) as c:
            admin.create_topic(c, "orders", 1, {})
            sa.create_acls(c, [
                sa.Acl("TOPIC", "orders", "LITERAL", "User:alice", "*", op, "ALLOW")
                for op in ("READ", "WRITE", "DESCRIBE")
            ])  # fmt: skip
            sa.create_acls(c, [sa.Acl("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "*",
                                      "IDEMPOTENT_WRITE", "ALLOW")])  # fmt: skip
        yield b
    finally:
        b.process.stop()
        b.process.kill()


@pytest.mark.spark
def test_write_and_read_as_a_permitted_user(spark: Any, secured: SecuredBroker) -> None:
    sparklog.spark.register(spark)
    df = spark.createDataFrame([(b"k", b"v1"), (b"k", b"v2")], "key binary, value binary")
    df.write.format("sparklog").options(**secured.options("alice"), topic="orders").save()
    rows = (
        spark.read.format("sparklog")
        .options(**secured.options("alice"), path=secured.process.data_dir, subscribe="orders")
        .load()
        .collect()
    )
    assert sorted(r.value for r in rows) == [b"v1", b"v2"]


@pytest.mark.spark
def test_read_without_read_permission_fails(spark: Any, secured: SecuredBroker) -> None:
    sparklog.spark.register(spark)
    reader = spark.read.format("sparklog").options(
        **secured.options("bob", "SASL_PLAINTEXT"), path=secured.process.data_dir,
        subscribe="orders",
    )  # fmt: skip
    with pytest.raises(Exception, match="User:bob may not READ topic 'orders'") as e:
        reader.load().collect()
    # checked in the driver: the broker's answer is the first line, not Spark's wrapping
    # of a Python worker's traceback
    assert str(e.value).splitlines()[0].startswith("User:bob may not READ topic 'orders'")


@pytest.mark.spark
def test_stream_without_read_permission_fails(
    spark: Any, secured: SecuredBroker, tmp_path: Path
) -> None:
    sparklog.spark.register(spark)
    with pytest.raises(Exception, match="User:bob may not READ topic 'orders'") as e:
        q = (
            spark.readStream.format("sparklog")
            .options(
                **secured.options("bob"),
                path=secured.process.data_dir,
                subscribe="orders",
                startingOffsets="earliest",
            )
            .load()
            .writeStream.format("memory")
            .queryName("bob_stream")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
    assert str(e.value).splitlines()[0].startswith("User:bob may not READ topic 'orders'")
