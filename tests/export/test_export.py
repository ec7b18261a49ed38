"""The export job: every format round-trips; ranges and timestamps; decode; upsert;
incremental runs exactly once, also across a killed run; bad arguments."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest

from sparklog.cli.export import parse
from sparklog.errors import ExportUsageError
from sparklog.export.job import export
from sparklog.storage import Storage
from sparklog.storage.crashpoints import CRASH_EXIT_CODE
from sparklog.storage.records import make_records
from tests.support.export import run

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
AVRO = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "n", "type": "int"},
        {"name": "status", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "amount", "type": ["null", "double"]},
    ],
}
_PARSED = fastavro.parse_schema(AVRO)


def avro_value(d: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, d)
    return buf.getvalue()


def order(i: int) -> dict[str, Any]:
    return {"n": i, "status": ("new", "paid", "sent")[i % 3], "tags": ["a", "b"][: i % 3],
            "amount": None if i % 4 == 0 else i / 4}  # fmt: skip


def fill(root: str, *, encode: str = "json", start: int = 0, rounds: int = 3) -> list[tuple]:
    """Topic "t", 2 partitions: per partition ``rounds`` batches of 10 records (keys k0..k9,
    every 7th a tombstone), all but the last batch rolled and sealed. Returns the model:
    (partition, offset, key, value, timestamp ms) of every record."""
    storage = Storage(root)
    if not storage.topics.exists("t"):
        storage.topics.create("t", 2, {"cleanup.policy": "compact"})
    model = []
    for p in range(2):
        log = storage.open_log("t", p)
        for r in range(rounds):
            base = log.log_end_offset
            values: list[bytes | None] = []
            for j in range(10):
                i = start + r * 10 + j
                if j % 7 == 0:
                    values.append(None)
                elif encode == "json":
                    values.append(json.dumps(order(i)).encode())
                else:
                    values.append(avro_value(order(i)))
            keys = [b"k%d" % j for j in range(10)]
            times = [T0 + 1000 * (start + r * 10 + j) for j in range(10)]
            log.append(make_records(values, keys=keys, timestamps=times))
            model += [(p, base + j, keys[j], values[j], times[j]) for j in range(10)]
            if r < rounds - 1:
                log.roll()
        log.close()
    return model


def delta_version(spark: Any, out: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, out).history(1).collect()[0]["version"])


def delta_rows(spark: Any, out: str, version: int | None = None) -> list[dict[str, Any]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(out).toArrow().to_pylist()


def rows_of(spark: Any, fmt: str, out: str) -> list[tuple]:
    if fmt == "delta":  # read by delta-spark itself
        t = spark.read.format("delta").load(out).toArrow()
        cols = [t.column(c).to_pylist() for c in ("partition", "offset", "key", "value")]
        ts = [int(x.timestamp() * 1000) for x in t.column("timestamp").to_pylist()]
        return sorted(zip(*cols, ts, strict=True))
    reader = spark.read.format({"avro": "org.apache.spark.sql.avro.AvroFileFormat"}.get(fmt, fmt))
    df = reader.load(out)
    if fmt == "json":  # binary columns travel as base64 strings in JSON
        df = df.selectExpr("partition", "offset", "unbase64(key) AS key",
                           "unbase64(value) AS value", "timestamp")  # fmt: skip
    out_rows = []
    for r in df.collect():
        ts = r["timestamp"]
        ms = int(ts.timestamp() * 1000) if not isinstance(ts, str) else None
        if isinstance(ts, str):
            from datetime import datetime

            ms = int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
        out_rows.append((r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                         None if r["value"] is None else bytes(r["value"]), ms))  # fmt: skip
    return sorted(out_rows, key=lambda x: (x[0], x[1]))


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "data")


@pytest.mark.parametrize("fmt", ["parquet", "delta", "avro", "json"])
def test_every_format_round_trips(spark: Any, root: str, tmp_path: Path, fmt: str) -> None:
    model = fill(root)
    result = run(spark, root, str(tmp_path / fmt), "--format", fmt)
    assert rows_of(spark, fmt, str(tmp_path / fmt)) == sorted(model)
    assert result.offsets == 60
    if fmt == "delta":
        assert delta_version(spark, str(tmp_path / fmt)) == 0  # one commit for the run


def test_native_and_python_readers_export_the_same(spark: Any, root: str, tmp_path: Path) -> None:
    fill(root)
    run(spark, root, str(tmp_path / "n"), "--format", "parquet")
    run(spark, root, str(tmp_path / "p"), "--format", "parquet", "--reader", "python")
    native, python = str(tmp_path / "n"), str(tmp_path / "p")
    assert rows_of(spark, "parquet", native) == rows_of(spark, "parquet", python)


def headers_of(spark: Any, fmt: str, out: str) -> list[tuple]:
    if fmt == "delta":
        t = spark.read.format("delta").load(out).toArrow()
        got = zip(t.column("offset").to_pylist(), t.column("headers").to_pylist(), strict=True)
        return sorted((o, [(h["key"], h["value"]) for h in hs]) for o, hs in got)
    df = spark.read.format(fmt).load(out)
    return sorted((r["offset"], [(h["key"], bytes(h["value"])) for h in r["headers"]])
                  for r in df.collect())  # fmt: skip


@pytest.mark.parametrize("fmt,reader", [("parquet", "native"), ("parquet", "python"),
                                        ("delta", "native")])  # fmt: skip
def test_include_headers_exports_every_records_headers(
    spark: Any, root: str, tmp_path: Path, fmt: str, reader: str
) -> None:
    storage = Storage(root)
    storage.topics.create("t", 1, {})
    log = storage.open_log("t", 0)
    expected = []
    for r in range(2):  # a sealed segment and the active one
        headers = [[("trace", b"%d" % (r * 5 + j))] * (j % 3) for j in range(5)]
        log.append(make_records([b"v"] * 5, keys=[b"k"] * 5, headers=headers))
        expected += [(r * 5 + j, hs) for j, hs in enumerate(headers)]
        if r == 0:
            log.roll()
    log.close()
    out = str(tmp_path / "out")
    run(spark, root, out, "--format", fmt, "--include-headers", "--reader", reader)
    assert headers_of(spark, fmt, out) == expected


def test_headers_are_left_out_unless_asked_for(spark: Any, root: str, tmp_path: Path) -> None:
    fill(root)
    run(spark, root, str(tmp_path / "out"), "--format", "parquet")
    assert "headers" not in spark.read.parquet(str(tmp_path / "out")).columns


def test_offset_ranges(spark: Any, root: str, tmp_path: Path) -> None:
    model = fill(root)
    run(spark, root, str(tmp_path / "o"), "--format", "parquet",
        "--starting-offsets", '{"t": {"0": 5, "1": 25}}',
        "--ending-offsets", '{"t": {"0": 12, "1": -1}}')  # fmt: skip
    got = [(p, o) for p, o, *_ in rows_of(spark, "parquet", str(tmp_path / "o"))]
    want = [(p, o) for p, o, *_ in model if (p == 0 and 5 <= o < 12) or (p == 1 and o >= 25)]
    assert got == sorted(want)


def test_starting_timestamp(spark: Any, root: str, tmp_path: Path) -> None:
    model = fill(root)
    cut = T0 + 1000 * 17
    run(spark, root, str(tmp_path / "ts"), "--format", "parquet", "--starting-timestamp", str(cut))
    got = rows_of(spark, "parquet", str(tmp_path / "ts"))
    assert got == sorted(r for r in model if r[4] >= cut)


def test_decode_json(spark: Any, root: str, tmp_path: Path) -> None:
    fill(root)
    run(spark, root, str(tmp_path / "j"), "--format", "parquet", "--decode", "json",
        "--schema", "n INT, status STRING, tags ARRAY<STRING>, amount DOUBLE")  # fmt: skip
    df = spark.read.parquet(str(tmp_path / "j"))
    assert "value" not in df.columns and {"n", "status", "tags", "amount"} <= set(df.columns)
    row = df.where("partition = 0 AND offset = 4").collect()[0]
    assert (row["n"], row["status"], row["tags"], row["amount"]) == (4, "paid", ["a"], None)
    row = df.where("partition = 1 AND offset = 5").collect()[0]
    assert (row["n"], row["status"], row["tags"], row["amount"]) == (5, "sent", ["a", "b"], 1.25)
    assert df.where("n IS NULL").count() == 2 * 3 * 2  # the tombstones decode to nulls


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_decode_avro(spark: Any, root: str, tmp_path: Path, fmt: str) -> None:
    fill(root, encode="avro")
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps(AVRO))
    out = str(tmp_path / "a")
    run(spark, root, out, "--format", fmt, "--decode", "avro", "--schema", str(schema))
    df = spark.read.format(fmt).load(out)
    got = {(r["partition"], r["offset"]): (r["n"], r["status"], list(r["tags"] or []), r["amount"])
           for r in df.collect() if r["n"] is not None}  # fmt: skip
    assert len(got) == 2 * 3 * 8
    assert got[(1, 13)] == (13, "paid", ["a"], 13 / 4)
    assert got[(0, 8)] == (8, "sent", ["a", "b"], None)
    assert not list(Path(root).glob(".export-tmp-*"))  # the scratch files are gone


def test_upsert_keeps_one_row_per_key_and_tombstones_delete(
    spark: Any, root: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "up")
    fill(root)
    run(spark, root, out, "--format", "delta", "--upsert")
    storage = Storage(root)
    for p in range(2):  # k3 gets a new value in p0; k5 is deleted in p1
        log = storage.open_log("t", p)
        key, value = (b"k3", b'{"n": 99}') if p == 0 else (b"k5", None)
        log.append(make_records([value], keys=[key], timestamps=[T0]))
        log.close()
    run(spark, root, out, "--format", "delta", "--upsert", "--starting-offsets",
        '{"t": {"0": 30, "1": 30}}')  # fmt: skip
    assert delta_version(spark, out) == 1  # one version per run
    rows = delta_rows(spark, out)
    keys = Counter(r["key"] for r in rows)
    assert set(keys.values()) == {1}  # one row per key
    # the last records of k0 and k7 are tombstones; k5 was deleted by the second run
    assert set(keys) == {b"k1", b"k2", b"k3", b"k4", b"k6", b"k8", b"k9"}
    assert next(r for r in rows if r["key"] == b"k3")["value"] == b'{"n": 99}'


def test_delta_spark_reads_an_upsert_tables_history_and_versions(
    spark: Any, root: str, tmp_path: Path
) -> None:
    from delta.tables import DeltaTable

    out, ck = str(tmp_path / "up"), str(tmp_path / "ck")
    fill(root)
    args = ("--format", "delta", "--upsert", "--incremental", "--checkpoint", ck)
    run(spark, root, out, *args)
    storage = Storage(root)
    log = storage.open_log("t", 0)  # k1 is deleted, k2 updated, k7 (a tombstone) comes back
    log.append(make_records([None, b'{"n": 2}', b'{"n": 7}'], keys=[b"k1", b"k2", b"k7"],
                            timestamps=[T0] * 3))  # fmt: skip
    log.close()
    run(spark, root, out, *args)
    history = DeltaTable.forPath(spark, out).history().orderBy("version").collect()
    assert [(h["version"], h["operation"]) for h in history] == [(0, "WRITE"), (1, "MERGE")]
    merge = history[1]["operationMetrics"]
    assert (merge["numTargetRowsDeleted"], merge["numTargetRowsUpdated"],
            merge["numTargetRowsInserted"]) == ("1", "1", "1")  # fmt: skip

    def live(version: int | None = None) -> dict[bytes, bytes]:
        rows = delta_rows(spark, out, version)
        assert len({r["key"] for r in rows}) == len(rows)  # one row per key
        return {r["key"]: r["value"] for r in rows}

    v0, v1 = live(0), live()  # the last record of k0 and k7 was a tombstone in version 0
    assert set(v0) == {b"k%d" % j for j in (1, 2, 3, 4, 5, 6, 8, 9)}
    assert set(v1) == {b"k%d" % j for j in (2, 3, 4, 5, 6, 7, 8, 9)}
    assert v1[b"k2"] == b'{"n": 2}' and v1[b"k7"] == b'{"n": 7}'
    assert v0[b"k2"] != b'{"n": 2}'  # version 0 as it was (time travel)
    assert {k: v for k, v in v1.items() if k not in (b"k2", b"k7")} == {
        k: v for k, v in v0.items() if k not in (b"k1", b"k2")}  # fmt: skip


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_incremental_exports_only_what_is_new(
    spark: Any, root: str, tmp_path: Path, fmt: str
) -> None:
    out, ck = str(tmp_path / "inc"), str(tmp_path / "ck")
    model = fill(root)
    run(spark, root, out, "--format", fmt, "--incremental", "--checkpoint", ck)
    again = run(spark, root, out, "--format", fmt, "--incremental", "--checkpoint", ck)
    assert again.rows == 0  # nothing new: nothing written
    model += fill(root, start=100, rounds=1)
    run(spark, root, out, "--format", fmt, "--incremental", "--checkpoint", ck)
    assert rows_of(spark, fmt, out) == sorted(model)  # every record exactly once
    if fmt == "delta":
        assert delta_version(spark, out) == 1


def _job(root: str, out: str, ck: str, *extra: str, crash_at: str | None = None) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SPARKLOG_CRASH_AT", None)
    if crash_at:
        env["SPARKLOG_CRASH_AT"] = crash_at
    cmd = [str(ROOT / "spark-submit.sh"), "export", "--topic", "t", "--data-dir", root,
           "--out", out, "--incremental", "--checkpoint", ck, *extra]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("point", ["export.before_write", "export.after_commit"])
def test_a_delta_export_killed_at_a_crash_point_reruns_exactly_once(
    spark: Any, root: str, tmp_path: Path, point: str
) -> None:
    out, ck = str(tmp_path / "d"), str(tmp_path / "ck")
    model = fill(root)
    args = ("--format", "delta", "--max-records-per-batch", "20")
    first = _job(root, out, ck, *args, crash_at=point)
    assert first.wait(600) == CRASH_EXIT_CODE, first.stdout.read() if first.stdout else ""
    second = _job(root, out, ck, *args)
    log = second.communicate(timeout=600)[0]
    assert second.returncode == 0, log
    assert rows_of(spark, "delta", out) == sorted(model)  # every record exactly once
    if point == "export.after_commit":
        assert "committed before" in log  # the replayed batch was recognised and skipped


@pytest.mark.slow
def test_a_parquet_export_killed_mid_run_reruns_exactly_once(
    spark: Any, root: str, tmp_path: Path
) -> None:
    out, ck = str(tmp_path / "p"), str(tmp_path / "ck")
    model = fill(root, rounds=12)  # 240 records, 12 micro-batches of 20
    first = _job(root, out, ck, "--format", "parquet", "--max-records-per-batch", "20")
    deadline = time.monotonic() + 300
    metadata = Path(out) / "_spark_metadata"
    while not (metadata.is_dir() and any(n.name.isdigit() for n in metadata.iterdir())):
        assert first.poll() is None and time.monotonic() < deadline, "the job ended early"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)  # a micro-batch is committed: kill the run mid-way
    first.wait()
    done = sorted(int(n) for n in os.listdir(metadata) if n.isdigit())
    assert done and done[-1] < 11  # killed before the last micro-batch
    second = _job(root, out, ck, "--format", "parquet", "--max-records-per-batch", "20")
    log = second.communicate(timeout=600)[0]
    assert second.returncode == 0, log
    assert rows_of(spark, "parquet", out) == sorted(model)  # through _spark_metadata: once


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "csv"], "invalid choice"),
        (["--format", "parquet", "--incremental"], "--checkpoint"),
        (["--format", "parquet", "--checkpoint", "/c"], "only for --incremental"),
        (["--format", "parquet", "--upsert"], "--format delta"),
        (["--format", "parquet", "--decode", "json"], "go together"),
        (["--format", "parquet", "--decode", "avro", "--schema", "/no/such.avsc"], "cannot read"),
        (["--format", "parquet", "--incremental", "--checkpoint", "/c", "--ending-offsets",
          "latest"], "contradicts"),
        (["--format", "parquet", "--starting-offsets", "earliest", "--starting-timestamp", "5"],
         "not allowed with"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(args: list[str], message: str, capsys: Any) -> None:
    from sparklog.cli.export import main

    code = main(["--topic", "t", "--out", "/tmp/x", *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_bad_schemas_and_topics_are_clear_errors(spark: Any, root: str, tmp_path: Path) -> None:
    fill(root)
    with pytest.raises(ExportUsageError, match="not a valid json schema"):
        run(spark, root, str(tmp_path / "x"), "--format", "parquet", "--decode", "json",
            "--schema", "n INTEGER BOGUS")  # fmt: skip
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}')
    with pytest.raises(ExportUsageError, match="not a valid avro schema"):
        run(spark, root, str(tmp_path / "y"), "--format", "parquet", "--decode", "avro",
            "--schema", str(bad))  # fmt: skip
    with pytest.raises(Exception, match="does not exist"):
        export(spark, parse(["--topic", "nope", "--data-dir", root, "--out",
                             str(tmp_path / "z"), "--format", "parquet"]))  # fmt: skip
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f.parquet").write_bytes(b"x")
    with pytest.raises(ExportUsageError, match="already holds files"):
        run(spark, root, str(tmp_path / "full"), "--format", "parquet")


def test_a_bad_schema_is_one_line_with_no_log_dump(
    spark: Any, root: str, tmp_path: Path, capfd: Any
) -> None:
    fill(root)
    capfd.readouterr()
    with pytest.raises(ExportUsageError, match="not a valid json schema"):
        run(spark, root, str(tmp_path / "x"), "--format", "parquet", "--decode", "json",
            "--schema", "not a schema")  # fmt: skip
    err = capfd.readouterr().err
    assert "QueryContextLogger" not in err and '"level": "ERROR"' not in err, err


def test_an_incremental_summary_tells_records_read_from_rows_written(
    spark: Any, root: str, tmp_path: Path
) -> None:
    fill(root)
    ck, out = str(tmp_path / "ck"), str(tmp_path / "lake")
    opts = parse(["--topic", "t", "--data-dir", root, "--out", out, "--format", "delta",
                  "--upsert", "--decode", "json", "--schema", "n INT", "--incremental",
                  "--checkpoint", ck])  # fmt: skip
    result = export(spark, opts, progress=lambda _line: None)
    line = result.summary(opts)
    assert f"{result.records} records read" in line and f"{result.rows} rows written" in line
    assert result.rows == len(delta_rows(spark, out))  # one row per live key
    assert result.records == 60 and result.rows < result.records, line


def test_the_job_exits_1_with_one_line_on_data_loss(root: str, tmp_path: Path) -> None:
    fill(root)
    log = Storage(root).open_log("t", 0)
    log.delete_records(5)
    log.close()
    proc = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "export", "--topic", "t", "--data-dir", root,
         "--out", str(tmp_path / "o"), "--format", "parquet",
         "--starting-offsets", '{"t": {"0": 0, "1": 0}}'],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "FAILED (data loss)" in proc.stdout + proc.stderr
    assert "t-0: offsets 0..4" in proc.stdout + proc.stderr


def test_delta_without_delta_sparks_jar_is_a_clear_usage_error(root: str, tmp_path: Path) -> None:
    fill(root, rounds=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARKLOG_JARS": str(tmp_path / "no-jars")}
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / "export.py"), "--topic", "t",
                           "--data-dir", root, "--out", str(tmp_path / "d"), "--format", "delta"],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "this Spark session has no delta-spark jar: run `make setup`" in done.stderr
    assert not (tmp_path / "d").exists()  # nothing written
