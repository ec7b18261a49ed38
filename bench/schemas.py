"""Typed reads benchmark: Avro values as typed columns in Spark, four ways, one run.

Data: ``--records`` Avro records of a 7-field schema (long, two strings, double,
timestamp-millis, boolean, int; about 60 bytes each), in two 4-partition topics of one
storage root, written straight to storage and sealed:

- ``typed``: framed as the registry's serializers frame them (magic byte 0, schema id),
  written with two schema versions (the second adds a field with a default), registered
  through a broker's Schema Registry;
- ``plain``: the same datums without the 5-byte prefix (what Spark's ``from_avro`` reads).

Each kind is a streaming query (``Trigger.AvailableNow`` into the ``noop`` sink), timed
from ``start()`` to the end of ``awaitTermination()``; kinds alternate, medians of
``--repeats``:

- ``binary``: ``format("sparklog")`` with the raw value bytes (``valueFormat=binary``): the
  ceiling, nothing decoded;
- ``typed``: ``format("sparklog").option("valueFormat", "avro")`` as a user writes it:
  the reader unframes the values (Arrow kernels) and Spark's ``from_avro`` decodes them in
  the JVM, one expression per writer schema, each resolved to the query's reader schema;
- ``typed-python``: the same with ``decodeIn=python``: fastavro in the Python reader,
  record by record (the fallback where spark-avro is missing);
- ``from_avro`` (the peer): the ``plain`` topic read as bytes and decoded by Spark's own
  ``from_avro`` with the writer schema: what a Spark user does today with unframed Avro
  (and cannot do at all with registry-framed records of several versions).

Every query also sums one decoded field, so that no decoding is pruned away.

    .venv/bin/python bench/schemas.py --quick     # 400k records, 1 repeat
    .venv/bin/python bench/schemas.py             # 2M records, median of 3
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import time
import urllib.request
import uuid
from typing import Any

import pyarrow as pa
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _machine import load_average, wait_for_quiet
from _spark import spark_session
from _tables import fmt_table

from sparklog.storage import Storage
from sparklog.storage.records import TIMESTAMP_TYPE

PARTITIONS = 4
SUBJECT = "typed-value"
V1: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "paid", "type": "boolean"},
        {"name": "items", "type": "int"},
    ],
}  # fmt: skip
V2: dict[str, Any] = {**V1, "fields": [*V1["fields"], {"name": "note", "type": "string",
                                                      "default": ""}]}  # fmt: skip


def register(url: str, schema: dict[str, Any]) -> int:
    body = json.dumps({"schema": json.dumps(schema)}).encode()
    req = urllib.request.Request(f"{url}/subjects/{SUBJECT}/versions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(json.loads(resp.read())["id"])


def datums(records: int, now_ms: int, *, mixed: bool) -> list[bytes]:
    """The Avro encodings, without framing: half of them of V1 if ``mixed`` (the typed
    topic), else all of V2 (the peer's topic: ``from_avro`` reads one writer schema)."""
    import fastavro

    v1, v2 = fastavro.parse_schema(V1), fastavro.parse_schema(V2)
    out = []
    buf = io.BytesIO()
    for i in range(records):
        rec = {"id": i, "customer": f"customer-{i % 50_000:05d}",
               "country": "NL" if i % 3 else "DE",
               "amount": i * 0.25, "ts": now_ms + i, "paid": bool(i % 2), "items": i % 17,
               "note": "gift" if i % 5 == 0 else ""}  # fmt: skip
        buf.seek(0)
        buf.truncate()
        fastavro.schemaless_writer(buf, v2 if i % 2 or not mixed else v1, rec)
        out.append(buf.getvalue())
    return out


def write_topic(root: str, topic: str, payloads: list[bytes], ids: tuple[int, int] | None) -> None:
    """``payloads`` into ``topic``, framed with ``ids`` (V1's for even rows, V2's for odd
    ones) unless None, and sealed."""
    storage = Storage(root)
    configs = {"segment.bytes": str(64 * 1024 * 1024), "max.message.bytes": str(2**30)}
    n = len(payloads)
    now = int(time.time() * 1000) - n
    framed = ids is not None
    prefixes = [b"\x00" + i.to_bytes(4, "big") for i in ids or ()]
    storage.topics.create(topic, PARTITIONS, configs)
    per = n // PARTITIONS
    for p in range(PARTITIONS):
        log = storage.open_log(topic, p)
        for start in range(0, per, 50_000):
            rows = range(p * per + start, p * per + min(start + 50_000, per))
            values = [(prefixes[i % 2] + payloads[i]) if framed else payloads[i] for i in rows]
            ts = pa.array([now + i for i in rows], pa.int64()).cast(TIMESTAMP_TYPE)
            batch = pa.record_batch(
                [pa.array([b"k%d" % i for i in rows], pa.binary()),
                 pa.array(values, pa.binary()), ts],
                names=["key", "value", "timestamp"],
            )  # fmt: skip
            log.append(batch, durable=False)
        log.roll()
        log.wait_sealed()
        log.close()


def run_query(df: Any, checkpoint: str) -> float:
    t0 = time.perf_counter()
    q = (
        df.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    return elapsed if rows else float("nan")


def queries(spark: Any, root: str, url: str) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    def stream(topic: str, **opts: str) -> Any:
        r = spark.readStream.format("sparklog").option("subscribe", topic)
        r = r.option("startingOffsets", "earliest")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load(root)

    return {
        "binary": lambda: stream("typed").select(F.length("value").alias("n")),
        "typed": lambda: stream("typed", valueFormat="avro", schemaRegistryUrl=url).select(
            F.col("value.amount").alias("n")
        ),
        "typed-python": lambda: stream(
            "typed", valueFormat="avro", schemaRegistryUrl=url, decodeIn="python"
        ).select(F.col("value.amount").alias("n")),
        "from_avro": lambda: stream("plain").select(
            from_avro("value", json.dumps(V2)).getField("amount").alias("n")
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="400k records, 1 repeat")
    ap.add_argument("--wait-quiet", type=float, default=30.0)
    ap.add_argument("--dir", default=None, help="where the data goes (default: a temp dir)")
    args = ap.parse_args()
    if args.quick:
        args.records, args.repeats = 400_000, 1
    args.records -= args.records % (PARTITIONS * 2)
    cleanup_on_signals()
    with temp_dir("sparklog-bench-schemas-", args.dir) as work:
        root = os.path.join(work, "data")
        t0 = time.perf_counter()
        with BrokerProcess(root, schema_registry=True) as broker:
            ids = (register(broker.registry_url, V1), register(broker.registry_url, V2))
        now_ms = int(time.time() * 1000)
        payloads = datums(args.records, now_ms, mixed=True)
        avg = sum(map(len, payloads)) / len(payloads)
        write_topic(root, "typed", payloads, ids)
        write_topic(root, "plain", datums(args.records, now_ms, mixed=False), None)
        del payloads
        print(f"data: {args.records:,} records (avg {avg:.0f} B Avro), schema ids {ids}, "
              f"written in {time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
        # the typed reads ask the broker's registry for schemas (schemaRegistryUrl)
        with BrokerProcess(root, schema_registry=True) as broker:
            import sparklog.spark

            spark = spark_session("bench-schemas")
            sparklog.spark.register(spark)
            kinds = queries(spark, root, broker.registry_url)
            times: dict[str, list[float]] = {k: [] for k in kinds}
            for k, build in kinds.items():  # warm-up
                run_query(build(), os.path.join(work, f"ck-warm-{k}"))
            for _ in range(args.repeats):
                for k, build in kinds.items():
                    wait_for_quiet(args.wait_quiet)
                    times[k].append(run_query(build(), os.path.join(work, f"ck-{uuid.uuid4()}")))
            spark.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: args.records / s for k, s in med.items()}
    rows = [[k, f"{med[k]:.2f}", f"{rate[k]:,.0f}", f"{rate[k] / rate['from_avro']:.2f}"]
            for k in kinds]  # fmt: skip
    print(f"\n{platform.node()} {os.cpu_count()} cores, load {load_average()}, "
          f"{args.records:,} records, median of {args.repeats}")  # fmt: skip
    print(fmt_table(["kind", "seconds", "rows/s", "vs from_avro"], rows))
    import _charts

    note = f"{args.records:,} Avro records, median of {args.repeats}; {platform.node()}"
    colors = [_charts.COLORS["other"], _charts.COLORS["sparklog"], _charts.COLORS["sparklog"],
              _charts.COLORS["peer"]]  # fmt: skip
    print(_charts.bars("schemas-typed-read.png", "Typed stream read, rows/s (Spark local[2])",
                       list(kinds), [rate[k] for k in kinds], "rows/s", colors=colors,
                       note=note))  # fmt: skip
    print(
        f"typed / from_avro: {rate['typed'] / rate['from_avro']:.2f}; "
        f"typed / binary: {rate['typed'] / rate['binary']:.2f}; "
        f"typed-python / from_avro: {rate['typed-python'] / rate['from_avro']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
