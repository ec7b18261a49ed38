"""Typed reads, writes and exports against an https Schema Registry (the broker's, with a
certificate from a test CA): verified with ``schemaRegistryCaFile``, refused with a clear
error without it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

import sparklog.spark
from sparklog.errors import OptionError
from sparklog.schemas.spark import from_registry
from sparklog_testkit.processes import BrokerProcess

from ..support.export import run
from ..support.schemas import V1
from .typed import avro, produce, read, rows

pytestmark = [pytest.mark.spark, pytest.mark.jvm]


@dataclass
class TlsRegistry:
    broker: BrokerProcess
    url: str
    cafile: str

    def client(self) -> SchemaRegistryClient:
        return SchemaRegistryClient({"url": self.url, "ssl.ca.location": self.cafile})


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRegistry]:
    import trustme

    where = tmp_path_factory.mktemp("tls-registry")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(where / "broker.key"))
    cert.cert_chain_pems[0].write_to_path(str(where / "broker.pem"))
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    config = where / "broker.toml"
    config.write_text(f'[security]\nssl_certfile = "{where / "broker.pem"}"\n'
                      f'ssl_keyfile = "{where / "broker.key"}"\n')  # fmt: skip
    extra = ("--config", str(config), "--schema-registry", "https://127.0.0.1:0")
    b = BrokerProcess(str(where / "data"), extra=extra).start()
    try:
        line = b.wait_for_line(lambda ln: "schema registry serving at" in ln, 30)
        assert line is not None, b.lines[-20:]
        found = re.search(r"(https://\S+)", line)
        assert found is not None, line
        yield TlsRegistry(b, found.group(1).rstrip("/"), str(where / "ca.pem"))
    finally:
        b.stop()


@pytest.fixture(scope="module")
def orders(tls: TlsRegistry) -> str:
    produce(tls.broker, "tls-orders", avro(tls.client(), V1), [{"id": 1, "item": "tea"}])
    return "tls-orders"


def test_a_typed_read_verifies_an_https_registry_with_the_ca_file(
    spark: Any, tls: TlsRegistry, orders: str
) -> None:
    for decode_in in ("jvm", "python"):
        df = read(spark, tls.broker, orders, valueFormat="avro", schemaRegistryUrl=tls.url,
                  schemaRegistryCaFile=tls.cafile, decodeIn=decode_in)  # fmt: skip
        assert [r["value"] for r in rows(df)] == [{"id": 1, "item": "tea"}]


def test_an_untrusted_https_registry_fails_the_read_naming_it(
    spark: Any, tls: TlsRegistry, orders: str
) -> None:
    with pytest.raises(Exception, match=r"schema registry https://127\.0\.0\.1:\d+.*CERTIFICATE"):
        read(spark, tls.broker, orders, valueFormat="avro", schemaRegistryUrl=tls.url).collect()


def test_from_registry_takes_the_ca_file(spark: Any, tls: TlsRegistry, orders: str) -> None:
    df = from_registry(read(spark, tls.broker, orders), subject=f"{orders}-value",
                       schema_registry_url=tls.url,
                       schema_registry_ca_file=tls.cafile)  # fmt: skip
    assert [r["value"] for r in rows(df)] == [{"id": 1, "item": "tea"}]


def test_a_typed_write_registers_through_an_https_registry(
    spark: Any, tls: TlsRegistry, tmp_path: Path
) -> None:
    sparklog.spark.register(spark)
    df = spark.createDataFrame([(2, "jam")], "id long, item string").selectExpr(
        "struct(id, item) AS value"
    )
    (df.write.format("sparklog").option("kafka.bootstrap.servers", tls.broker.bootstrap)
     .option("topic", "tls-written").option("valueFormat", "avro")
     .option("autoRegisterSchemas", "true").option("schemaRegistryUrl", tls.url)
     .option("schemaRegistryCaFile", tls.cafile).save())  # fmt: skip
    assert tls.client().get_latest_version("tls-written-value").version == 1
    got = read(spark, tls.broker, "tls-written", valueFormat="avro")  # from storage
    assert [r["value"] for r in rows(got)] == [{"id": 2, "item": "jam"}]


def test_an_export_verifies_an_https_registry_with_the_ca_file(
    spark: Any, tls: TlsRegistry, tmp_path: Path
) -> None:
    produce(tls.broker, "t", avro(tls.client(), V1), [{"id": 3, "item": "pie"}])
    out = str(tmp_path / "out")
    run(spark, tls.broker.data_dir, out, "--format", "parquet", "--decode", "registry",
        "--schema-registry-url", tls.url, "--schema-registry-ca-file", tls.cafile)  # fmt: skip
    assert [(r["id"], r["item"]) for r in spark.read.parquet(out).collect()] == [(3, "pie")]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"schemaRegistryCaFile": "/nonexistent/ca.pem", "schemaRegistryUrl": "https://h:1"},
         "no such file"),
        ({"schemaRegistryCaFile": __file__, "schemaRegistryUrl": "http://h:1"},
         "needs an https:// schemaRegistryUrl"),
        ({"schemaRegistryCaFile": __file__}, "needs an https:// schemaRegistryUrl"),
    ],
)  # fmt: skip
def test_a_ca_file_option_that_cannot_apply_is_refused(
    spark: Any, tls: TlsRegistry, orders: str, options: dict[str, str], why: str
) -> None:
    with pytest.raises(Exception, match=why) as e:
        read(spark, tls.broker, orders, valueFormat="avro", **options)
    assert isinstance(e.value, OptionError) or "OptionError" in str(e.value)
