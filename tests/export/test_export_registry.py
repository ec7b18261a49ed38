"""``export --decode registry``: registry-framed Avro values exported as typed columns,
each record decoded with its own writer schema and resolved to the subject's latest.

The storage root's ``_schemas`` topic is written with the registry's own records
(``tests.schemas.test_codec.SchemasTopic``); values are framed as confluent-kafka frames
them. Part of each partition is sealed (read by Spark's Parquet reader), the rest is not
(read through ``format("sparklog")``), so both paths of the export decode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparklog.cli.export import parse
from sparklog.errors import ExportUsageError
from sparklog.storage.records import make_records
from tests.support.export import run
from tests.support.schemas import V1, V2, SchemasTopic, avro

pytestmark = [pytest.mark.spark, pytest.mark.jvm]


def fill(root: str) -> tuple[int, int]:
    """Topic "t" (1 partition): a sealed segment of V1 records and tombstones, then an
    active one of V2 records; the two schema ids."""
    registry = SchemasTopic(root)
    v1 = registry.register("t-value", V1)
    v2 = registry.register("t-value", V2)
    storage = registry.storage
    storage.topics.create("t", 1, {})
    log = storage.open_log("t", 0)
    log.append(make_records([avro(V1, {"id": 1, "item": "tea"}, v1), None],
                            keys=[b"a", b"b"]))  # fmt: skip
    log.roll()
    log.append(make_records([avro(V2, {"id": 2, "item": "jam", "qty": 3, "note": "x"}, v2)],
                            keys=[b"c"]))  # fmt: skip
    log.close()
    return v1, v2


def test_values_are_exported_as_the_subjects_latest_schema(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    v1, v2 = fill(root)
    out = str(tmp_path / "out")
    run(spark, root, out, "--format", "parquet", "--decode", "registry")
    rows = sorted(spark.read.parquet(out).collect(), key=lambda r: r["offset"])
    got = [(r["offset"], r["id"], r["item"], r["qty"], r["note"], r["valueSchemaId"])
           for r in rows]  # fmt: skip
    assert got == [
        (0, 1, "tea", 1, None, v1),  # V1: qty takes its default
        (1, None, None, None, None, None),  # a tombstone
        (2, 2, "jam", 3, "x", v2),
    ]
    assert "headers" not in spark.read.parquet(out).columns


def test_an_older_version_as_reader_drops_newer_fields(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    fill(root)
    out = str(tmp_path / "out")
    run(spark, root, out, "--format", "json", "--decode", "registry", "--schema-version", "1",
        "--include-headers")  # fmt: skip
    df = spark.read.json(out)
    assert {"id", "item", "headers"} <= set(df.columns) and "qty" not in df.columns


def test_an_undecodable_record_fails_the_export_naming_it(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    fill(root)
    from sparklog.storage import Storage

    log = Storage(root).open_log("t", 0)
    log.append(make_records([b"\x00\x00\x00\x03\xe7xyz"]))  # schema id 999
    log.close()
    with pytest.raises(Exception, match="t-0 offset 3: .*schema id 999 is not a version"):
        run(spark, root, str(tmp_path / "out"), "--format", "parquet", "--decode", "registry")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--decode", "registry", "--schema", "x.avsc"], "not --schema"),
        (["--decode", "avro", "--schema", "x", "--subject", "s"], "--subject is for"),
        (["--decode", "registry", "--schema-version", "0"], "a version >= 1"),
        (
            ["--decode", "registry", "--schema-registry-ca-file", __file__],
            "needs an https:// --schema-registry-url",
        ),
        (
            [
                "--decode",
                "registry",
                "--schema-registry-url",
                "https://h:1",
                "--schema-registry-ca-file",
                "/nonexistent.pem",
            ],
            "no such file",
        ),
        (
            ["--decode", "avro", "--schema", "x", "--schema-registry-ca-file", __file__],
            "--schema-registry-ca-file is for",
        ),
    ],
)
def test_wrong_registry_options_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(ExportUsageError, match=message):
        parse(["--topic", "t", "--out", "/tmp/x", "--format", "parquet", *args])


def test_a_missing_subject_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    fill(root)
    with pytest.raises(ExportUsageError, match="subject 'other-value'"):
        run(spark, root, str(tmp_path / "out"), "--format", "parquet", "--decode", "registry",
            "--subject", "other-value")  # fmt: skip
