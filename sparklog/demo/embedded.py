"""The embedded demo (``make demo``): the whole product on one machine, end to end.

1. Start a broker process on loopback with a fresh data directory.
2. Create two topics: ``orders`` (a compacted changelog: the latest state of each order)
   and ``clicks`` (a plain event stream with size-based retention).
3. Produce a realistic stream with a real Kafka client (confluent-kafka): keyed order
   events with updates and deletes (tombstones), and click events.
4. Run a Spark streaming query over ``orders`` (``readStream.format("sparklog")``) as the
   consumer group ``demo-dashboard``, in micro-batches, and watch the group's lag - what
   ``sparklog groups describe`` and any Kafka tool show - go to zero.
5. Run the compaction job over ``orders`` and the retention job over ``clicks`` while the
   broker keeps serving; check that the latest value of every order is unchanged.
6. Export ``orders`` to Delta (one row per order: upsert) and ``clicks`` to Parquet, and
   read both back.
7. Stop the broker (SIGTERM: it syncs and closes its logs) and print a report.
8. Remove the demo's directory (``--keep`` keeps it; a failed demo leaves it to look at),
   once the data-dir lease shows the broker let go of its data.

Every step checks its result against a model of what was produced; a mismatch fails the
demo with a message naming it.

While the producer writes, a Spark batch query reads the ``orders`` written so far: a
reader beside a live writer, and the first Spark job of the run, which pays the cold start
(JVM warm-up, the Python workers) while the producer works instead of before the
streaming query (about a third of the demo's time when it came first).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparklog.demo import DemoReport, Say, expect, tidy
from sparklog.demo.processes import BrokerProcess
from sparklog.errors import DemoCheckError, KafkaRequestError
from sparklog.kafka import admin as kc
from sparklog.kafka.client import KafkaClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ORDERS, CLICKS, GROUP = "orders", "clicks", "demo-dashboard"
STATUSES = ("created", "paid", "packed", "shipped", "delivered")


@dataclass
class Model:
    """What the producer sent: the latest value per order key (None: deleted)."""

    latest: dict[bytes, bytes | None] = field(default_factory=dict)
    orders_sent: int = 0
    tombstones: int = 0
    clicks_sent: int = 0

    @property
    def live(self) -> dict[bytes, bytes]:
        return {k: v for k, v in self.latest.items() if v is not None}


def produce(bootstrap: str, model: Model, *, events: int, keys: int, seed: int = 42) -> float:
    """Order events (creates, status updates, deletes) and clicks; returns seconds."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            # librdkafka's default (1 MB) would put a small run's whole partition in one
            # batch, and a segment rolls only between appends: keep batches Kafka-sized
            "batch.size": 64 * 1024,
            "partitioner": "murmur2_random",  # place keys as Java clients and Spark do
        }
    )
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    def send(topic: str, key: bytes, value: bytes | None) -> None:
        while True:
            try:
                p.produce(topic, key=key, value=value, on_delivery=delivered)
                return
            except BufferError:  # librdkafka's local queue is full: let deliveries drain
                p.poll(0.05)

    t0 = time.perf_counter()
    status: dict[bytes, int] = {}
    for i in range(events):
        key = b"order-%06d" % rng.randrange(keys)
        if key in status and rng.random() < 0.08:
            value: bytes | None = None  # the order is cancelled: a tombstone
            del status[key]
            model.tombstones += 1
        else:
            step = min(status.get(key, -1) + 1, len(STATUSES) - 1)
            status[key] = step
            value = json.dumps(
                {
                    "order": key.decode(),
                    "status": STATUSES[step],
                    "amount": rng.randrange(100, 99_999) / 100,
                    "seq": i,
                }
            ).encode()
        model.latest[key] = value
        send(ORDERS, key, value)
        if i % 2 == 0:
            click = json.dumps({"page": f"/p/{rng.randrange(500)}", "seq": i}).encode()
            send(CLICKS, b"user-%d" % rng.randrange(5000), click)
            model.clicks_sent += 1
        if i % 1000 == 0:
            p.poll(0)
        model.orders_sent += 1
    remaining = p.flush(120)
    expect(remaining == 0 and not errors, f"producer: {remaining} undelivered, errors {errors[:3]}")
    return time.perf_counter() - t0


def _lag(bootstrap: str) -> tuple[int, float | None]:
    """The group's total lag in records and its worst lag in seconds (0 if caught up)."""
    with KafkaClient(bootstrap) as c:
        try:
            rows = kc.describe_group(c, GROUP, int(time.time() * 1000))["partitions"]
        except KafkaRequestError:  # no commits yet: the whole topic is unread
            ends = kc.list_offsets(c, ORDERS, kc.topic_partitions(c, ORDERS), -1)
            return sum(o for o, _ in ends.values()), None
    seconds = [r["lag_seconds"] for r in rows if r["lag_seconds"] is not None]
    return sum(r["lag"] for r in rows), max(seconds, default=None)


def stream_orders(
    spark: SparkSession, data_dir: str, bootstrap: str, checkpoint: str, per_batch: int, say: Say
) -> tuple[int, list[int]]:
    """The dashboard query: micro-batches of ``orders`` as group ``demo-dashboard``; returns
    the rows it saw and the group's lag after each batch."""
    lags: list[int] = []
    seen = [0]

    def on_batch(df: Any, batch_id: int) -> None:
        counts = {
            r["status"] or "deleted": r["count"]
            for r in df.selectExpr("get_json_object(cast(value AS string), '$.status') AS status")
            .groupBy("status")
            .count()
            .collect()
        }
        seen[0] += sum(counts.values())
        lag, _ = _lag(bootstrap)  # the commit of the previous batch is visible now
        lags.append(lag)
        say(
            f"  micro-batch {batch_id}: {sum(counts.values()):,} events "
            f"({', '.join(f'{k}={v}' for k, v in sorted(counts.items(), key=str))}); "
            f"group lag before this batch's commit: {lag:,} records"
        )

    q = (
        spark.readStream.format("sparklog")
        .option("subscribe", ORDERS)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .option("group", GROUP)
        .option("kafka.bootstrap.servers", bootstrap)
        .load(data_dir)
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    if q.exception() is not None:
        raise DemoCheckError(f"the streaming query failed: {q.exception()}")
    return seen[0], lags


@contextlib.contextmanager
def _started(broker: BrokerProcess, *, beside: Callable[[], None]) -> Iterator[BrokerProcess]:
    """``with broker:``, with its start (a Python process that imports sparklog and opens
    its storage) overlapping ``beside`` (registering the data source, which starts a
    Python worker); the broker is stopped however the block ends. ``beside`` runs in the
    other thread: the broker dies with the thread that starts it (PR_SET_PDEATHSIG)."""
    try:
        with ThreadPoolExecutor(1) as pool:
            done = pool.submit(beside)
            broker.start()
            done.result()
        yield broker
    finally:
        broker.__exit__(None, None, None)


def read_while_writing(spark: SparkSession, data_dir: str) -> int:
    """The ``orders`` events a Spark batch query finds while the producer is writing."""
    df = spark.read.format("sparklog").option("subscribe", ORDERS).load(data_dir)
    statuses = df.selectExpr("get_json_object(cast(value AS string), '$.status') AS status")
    return sum(r["count"] for r in statuses.groupBy("status").count().collect())


def latest_per_key(spark: SparkSession, data_dir: str) -> dict[bytes, bytes | None]:
    """The last value of every key in the ``orders`` log, read by Spark from offset 0."""
    from pyspark.sql import functions as F

    df = spark.read.format("sparklog").option("subscribe", ORDERS).load(data_dir)
    last = df.groupBy("key").agg(F.max_by("value", "offset").alias("value")).collect()
    return {bytes(r["key"]): None if r["value"] is None else bytes(r["value"]) for r in last}


def run(
    spark: SparkSession,
    data_dir: str,
    *,
    events: int = 300_000,
    keys: int = 20_000,
    keep: bool = False,
    say: Say = print,
) -> DemoReport:
    import sparklog.spark
    from sparklog.compaction.compactor import compact
    from sparklog.compaction.retention import apply_retention
    from sparklog.storage import Storage

    shutil.rmtree(data_dir, ignore_errors=True)  # the demo's own directory: start afresh
    report = DemoReport()
    model = Model()
    broker = BrokerProcess(f"{data_dir}/broker")
    t_start = time.perf_counter()
    with _started(broker, beside=lambda: sparklog.spark.register(spark)):
        say(f"broker: listening on {broker.bootstrap} (data in {broker.data_dir})")
        # several sealed segments per partition at any --events, so compaction has work
        segment_bytes = min(512 * 1024, max(64 * 1024, events * 4))
        with KafkaClient(broker.bootstrap) as c:
            kc.create_topic(
                c,
                ORDERS,
                4,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(segment_bytes),
                    "min.cleanable.dirty.ratio": "0.1",
                    "delete.retention.ms": "0",
                    "file.delete.delay.ms": "1000",
                },
            )
            kc.create_topic(
                c,
                CLICKS,
                2,
                {
                    "cleanup.policy": "delete",
                    "segment.bytes": str(64 * 1024),
                    "retention.bytes": str(16 * 1024),
                    "file.delete.delay.ms": "1000",
                },
            )
        say(
            f"topics: {ORDERS} (4 partitions, compacted), {CLICKS} (2 partitions, "
            "retention.bytes 16 KiB)"
        )

        with ThreadPoolExecutor(1) as pool:
            reading = pool.submit(read_while_writing, spark, broker.data_dir)
            seconds = produce(broker.bootstrap, model, events=events, keys=keys)
            seen_live = reading.result()
        report.timings["produce"] = seconds
        report.add(
            f"produced   {model.orders_sent:,} order events ({model.tombstones:,} "
            f"deletes) for {len(model.latest):,} orders and {model.clicks_sent:,} "
            f"clicks with confluent-kafka in {seconds:.1f} s"
        )
        say(report.lines[-1])
        expect(
            seen_live <= model.orders_sent,
            f"a batch query read {seen_live:,} order "
            f"events while {model.orders_sent:,} were produced",
        )
        report.add(
            f"read       {seen_live:,} order events with a Spark batch query started "
            "while the producer wrote"
        )
        say(report.lines[-1])

        lag_before, _ = _lag(broker.bootstrap)
        say(f"group {GROUP}: lag {lag_before:,} records before the query starts")
        t0 = time.perf_counter()
        seen, lags = stream_orders(
            spark,
            broker.data_dir,
            broker.bootstrap,
            f"{data_dir}/checkpoints/dashboard",
            max(events // 4, 1),
            say,
        )
        lag_after, lag_after_s = _lag(broker.bootstrap)
        report.timings["stream"] = time.perf_counter() - t0
        expect(
            seen == model.orders_sent,
            f"the query saw {seen:,} events, {model.orders_sent:,} were produced",
        )
        expect(lag_after == 0, f"group {GROUP} still lags {lag_after} records")
        report.add(
            f"streamed   {seen:,} events in {len(lags)} micro-batches; group lag "
            f"{lag_before:,} -> {' -> '.join(f'{x:,}' for x in lags[1:])}"
            f"{' -> ' if len(lags) > 1 else ''}{lag_after} records "
            f"({lag_after_s or 0:.0f} s) in {report.timings['stream']:.1f} s"
        )
        say(report.lines[-1])

        storage = Storage(broker.data_dir)
        before = latest_per_key(spark, broker.data_dir)
        expect(before == model.latest, "the orders log disagrees with what was produced")
        t0 = time.perf_counter()
        compacted = compact(spark, broker.data_dir, [ORDERS], progress=lambda m: say("  " + m))
        # the latest values are checked after the second run: compaction never brings back
        # a value it dropped, so a first run that lost one fails that check too
        first = [o for o in compacted.outcomes if o.status == "compacted"]
        expect(
            bool(first),
            "compaction cleaned no partition: " + "; ".join(o.line() for o in compacted.outcomes),
        )
        # tombstones stay delete.retention.ms (0 here) after the first compaction that
        # covered them, so the next run removes them (Kafka's KIP-534 rule)
        again = compact(spark, broker.data_dir, [ORDERS], progress=lambda m: say("  " + m))
        second = [o for o in again.outcomes if o.status == "compacted"]
        report.timings["compaction"] = time.perf_counter() - t0
        after = latest_per_key(spark, broker.data_dir)
        expect(
            {k: v for k, v in after.items() if v is not None} == model.live,
            "after compaction the latest value of some order changed",
        )

        def records(runs: list[Any]) -> str:
            before, after = (
                sum(getattr(o, k) for o in runs) for k in ("records_before", "records_after")
            )
            return f"{before:,} -> {after:,} records"

        report.add(
            f"compacted  {ORDERS}: {records(first)} in the cleaned segments of "
            f"{len(first)} partitions, then {records(second)} in a second run "
            f"({sum(o.tombstones_removed for o in first + second):,} tombstones "
            f"dropped); offsets kept, latest value of all {len(model.live):,} live "
            f"orders unchanged ({report.timings['compaction']:.1f} s)"
        )
        say(report.lines[-1])

        t0 = time.perf_counter()
        retained = apply_retention(broker.data_dir, [CLICKS], progress=lambda m: say("  " + m))
        report.timings["retention"] = time.perf_counter() - t0
        deleted = sum(o.records_deleted for o in retained.outcomes)
        starts = {o.partition: o.log_start_after for o in retained.outcomes}
        expect(deleted > 0, "retention deleted nothing from clicks")
        report.add(
            f"retention  {CLICKS}: {sum(o.segments_deleted for o in retained.outcomes)} "
            f"segments ({deleted:,} records) past retention.bytes deleted; log start "
            f"now {starts}"
        )
        say(report.lines[-1])

        export_lines = export_and_read_back(spark, broker.data_dir, data_dir, model, storage, say)
        for line in export_lines:
            report.add(line)
            say(line)
        code = broker.stop()
        expect(code == 0, f"the broker exited with {code}")
        expect(not broker.errors(), f"the broker logged errors: {broker.errors()[:3]}")
    expect(not broker.alive, "the broker is still running")
    report.timings["total"] = time.perf_counter() - t_start
    report.add(f"shutdown   broker stopped cleanly (exit 0); total {report.timings['total']:.0f} s")
    report.add(tidy(data_dir, broker.data_dir, keep=keep))
    return report


def export_and_read_back(
    spark: SparkSession, root: str, data_dir: str, model: Model, storage: Any, say: Say
) -> list[str]:
    """Export orders (Delta, one row per order, values decoded from JSON) and clicks
    (Parquet); read both back and check them against the model and the log."""
    from delta.tables import DeltaTable

    from sparklog.cli.export import parse
    from sparklog.export.job import export

    lines = []
    delta_out = f"{data_dir}/exports/orders_delta"
    t0 = time.perf_counter()
    result = export(
        spark,
        parse(
            [
                "--topic",
                ORDERS,
                "--format",
                "delta",
                "--out",
                delta_out,
                "--data-dir",
                root,
                "--upsert",
                "--decode",
                "json",
                "--schema",
                "order STRING, status STRING, amount DOUBLE, seq LONG",
            ]
        ),
        progress=lambda m: say("  " + m),
    )
    table = spark.read.format("delta").load(delta_out).select("order", "status").toArrow()
    got = dict(
        zip(table.column("order").to_pylist(), table.column("status").to_pylist(), strict=True)
    )
    version = DeltaTable.forPath(spark, delta_out).history(1).collect()[0]["version"]
    want = {k.decode(): json.loads(v)["status"] for k, v in model.live.items()}
    expect(
        got == want,
        f"the Delta table holds {len(got):,} orders, expected {len(want):,} "
        "with their latest status",
    )
    lines.append(
        f"exported   {ORDERS} -> Delta (upsert, JSON decoded): {table.num_rows:,} rows"
        f", one per live order, table version {version}, written and read back by "
        f"delta-spark ({time.perf_counter() - t0:.1f} s)"
    )
    parquet_out = f"{data_dir}/exports/clicks_parquet"
    t0 = time.perf_counter()
    result = export(
        spark,
        parse(
            [
                "--topic",
                CLICKS,
                "--format",
                "parquet",
                "--out",
                parquet_out,
                "--data-dir",
                root,
            ]
        ),
        progress=lambda m: say("  " + m),
    )
    back = spark.read.parquet(parquet_out)
    n = back.count()
    in_log = sum(
        v.high_watermark - v.log_start_offset
        for v in (storage.reader(CLICKS, p).view() for p in range(2))
    )
    expect(n == in_log == result.rows, f"{n:,} clicks read back, the log holds {in_log:,}")
    lines.append(
        f"exported   {CLICKS} -> Parquet: {n:,} rows (what retention kept), read back "
        f"with spark.read.parquet ({time.perf_counter() - t0:.1f} s)"
    )
    return lines
