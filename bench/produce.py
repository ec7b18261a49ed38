"""Broker produce benchmark: a confluent-kafka producer against a sparklog broker process,
with two in-run baselines.

Runs. Every broker is started once and kept for the whole benchmark (``Servers``): a
sparklog broker process (fresh data dir) and, unless ``--no-kafka``, Apache Kafka 4.3.1
(``bench/_kafka.py``: a single-node KRaft broker from the jars ``make setup`` fetches) in
each flavour: its default flush policy (acked from the page cache; Kafka's durability is
replication) and ``flush.messages=1`` (an fsync before each ack, as sparklog acks). First
``--warmup`` unmeasured runs on each (a JVM's first million records run partly
interpreted: Kafka is measured warm), then ``--repeat`` rounds, each one run per broker,
alternating which goes first. Every run writes a topic of its own.

One run: one librdkafka producer (acks=all, linger.ms=5, batch.size=1 MiB, no compression,
no idempotence) sends ``--records`` records (16-byte keys cycled from a pool of 1,000
random keys, one 100-byte random value) to a 4-partition topic, as fast as ``produce()``
accepts them. Timed from the first ``produce()`` to the end of ``flush()`` (every record
acknowledged, i.e. fsynced by the sparklog broker). Afterwards sparklog's stored logs must
hold exactly ``--records`` records (no loss, no duplicates). Ack latency = ``produce()``
call to delivery callback, sampled every ``--sample-every``-th record; at saturation it is
mostly time queued in the producer (bounded by ``queue.buffering.max.messages``), so two
more figures are given: librdkafka's own request round-trip (``rtt``, i.e. the broker's
share) and an idle closed-loop latency (one record at a time, ``--idle-probe`` records).
The summary prints sparklog / Kafka for records/s and broker CPU per record.

Baselines (from the same records, in the same run, single core):

* (a) disk: the produce batches' bytes appended to one plain file, ``fdatasync`` per 1 MiB.
* (b) CPU: ``sparklog.kafka.records.decode_batch`` (CRC-32C, aiokafka record parsing, Arrow
  columns) over every produce batch: no network, no disk. The batches are the real ones:
  the stored Arrow batches of the first measured run (one per produce batch, as librdkafka cut
  them) rebuilt into Kafka record batches with aiokafka's ``DefaultRecordBatchBuilder``.

Payload MB = key + value bytes (116 per record), 1 MB = 10^6 bytes. The producer client and
the broker share the machine's cores; CPU seconds of each are reported, and so are those of
every other process during the run (from /proc/stat): on a shared machine, before each
measurement the script waits up to ``--wait-quiet`` seconds for the CPUs to be idle.

``--profile PATH`` adds one unmeasured run with py-spy attached to the broker (``--native``,
idle threads included), writes its collapsed stacks to PATH and prints where the broker's
time went.

    .venv/bin/python bench/produce.py --quick           # 500k records, 1 repeat
    .venv/bin/python bench/produce.py                   # 5M records, median of 3
    .venv/bin/python bench/produce.py --records 1000000 # the issue's workload (1M, warm)
    .venv/bin/python bench/produce.py --profile /tmp/produce-profile.txt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import pyarrow as pa
from _baselines import rebuild_kafka_batches, run_cpu, run_disk, stored_batches
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _machine import load_average, self_cpu_seconds, system_busy_seconds, wait_for_quiet
from _profile import Profiler, summarize_profile
from _tables import fmt_table, percentile
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

KEY_SIZE = 16
VALUE_SIZE = 100
RECORD_PAYLOAD = KEY_SIZE + VALUE_SIZE
KEY_POOL = 1000  # distinct keys, cycled
MB = 1_000_000
MIB = 1024 * 1024
TOPIC = "bench"
PROBE_TOPIC = "probe"
FLUSH_TIMEOUT = 300  # seconds: a run that has not been acknowledged by then fails
# Anchors from the issue (records/s)
KAFKA_PUBLISHED = 821_000  # Kafka's single-producer figure (78 MB/s of 100-byte values, 6 cores)
FLOOR = 500_000  # this 2-core machine, producer and broker together
GOAL = 1_000_000
CPU_TARGET = 0.5  # broker >= 0.5 of baseline (b)


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Workload:
    keys: list[bytes]
    value: bytes


def make_workload(seed: int = 42, keys: int = KEY_POOL) -> Workload:
    rnd = random.Random(seed)
    return Workload([rnd.randbytes(KEY_SIZE) for _ in range(keys)], rnd.randbytes(VALUE_SIZE))


def producer_config(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": MIB,
        "batch.num.messages": 1_000_000,
        "queue.buffering.max.messages": args.queue_messages,
        "queue.buffering.max.kbytes": args.queue_kbytes,
        "compression.type": "none",
        "enable.idempotence": False,
        # message.max.bytes stays at librdkafka's default (1,000,000): it also caps a batch,
        # and sparklog refuses batches whose Arrow payload exceeds max.message.bytes
        "statistics.interval.ms": 1000,
        "message.timeout.ms": FLUSH_TIMEOUT * 1000,
    }


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])
        for f in futures.values():
            f.result(30)
        admin.poll(0.1)  # serve what is left, so that destroying it is quiet
    finally:
        del admin


# ---------------------------------------------------------------------------- broker run

#: the Apache Kafka peer runs: (label, log.flush.interval.messages or None for the default)
KAFKA_FLAVOURS = (("Apache Kafka 4.3.1", None), ("Apache Kafka 4.3.1, flush.messages=1", 1))


@dataclass
class ProduceRun:
    records: int
    seconds: float
    client_cpu: float
    broker_cpu: float
    latencies: list[float]  # seconds, produce() -> delivery callback, sampled
    others_cpu: float  # CPU seconds other processes used meanwhile (concurrent test suites)
    rtt_p50_ms: float = float("nan")  # librdkafka stats: median over 1 s windows
    rtt_p99_ms: float = float("nan")
    queue_p50_ms: float = float("nan")  # int_latency: time queued in the producer
    batch_records: list[int] = field(default_factory=list)  # records per produce batch
    load: str = ""
    note: str = ""  # from wait_for_quiet

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_PAYLOAD / MB / self.seconds


def _window_medians(stats: list[str]) -> dict[str, float]:
    """Median over librdkafka's 1-second stats windows of the broker's rtt/int_latency."""
    rtt50, rtt99, q50 = [], [], []
    for raw in stats:
        for b in json.loads(raw).get("brokers", {}).values():
            if b.get("nodeid", -1) < 0:
                continue
            if b["rtt"]["cnt"]:
                rtt50.append(b["rtt"]["p50"] / 1000)
                rtt99.append(b["rtt"]["p99"] / 1000)
            if b["int_latency"]["cnt"]:
                q50.append(b["int_latency"]["p50"] / 1000)
    med = statistics.median
    nan = float("nan")
    return {
        "rtt_p50_ms": med(rtt50) if rtt50 else nan,
        "rtt_p99_ms": med(rtt99) if rtt99 else nan,
        "queue_p50_ms": med(q50) if q50 else nan,
    }


def produce_records(
    broker: BrokerProcess,
    topic: str,
    n: int,
    work: Workload,
    args: argparse.Namespace,
    profiler: Profiler | None = None,
) -> ProduceRun:
    """Produce ``n`` records as fast as librdkafka takes them; return when all are acked.
    ``profiler`` samples the broker from just before the first record to the last ack."""
    stats: list[str] = []
    conf = producer_config(broker.bootstrap, args)
    conf["stats_cb"] = stats.append
    p = Producer(conf)
    try:
        p.list_topics(topic, timeout=30)  # connected, metadata known: not timed
        note = wait_for_quiet(getattr(args, "wait_quiet", 0))
        stats.clear()
        latencies: list[float] = []
        errors: list[Any] = []
        clock = time.perf_counter
        produce, poll = p.produce, p.poll
        keys, value = work.keys, work.value
        pool = len(keys)
        every = max(1, args.sample_every)

        def sampled(t0: float) -> Callable[[Any, Any], None]:
            def done(err: Any, _msg: Any) -> None:
                if err is None:
                    latencies.append(clock() - t0)
                else:
                    errors.append(err)

            return done

        if profiler is not None:
            profiler.start()
        cpu0, bcpu0, sys0 = self_cpu_seconds(), broker.cpu_seconds(), system_busy_seconds()
        t0 = clock()
        for start in range(0, n, every):
            while True:
                try:
                    produce(topic, value, keys[start % pool], on_delivery=sampled(clock()))
                    break
                except BufferError:
                    poll(0.001)
            for i in range(start + 1, min(n, start + every)):
                while True:
                    try:
                        produce(topic, value, keys[i % pool])
                        break
                    except BufferError:
                        poll(0.001)
            poll(0)
            if not start % 100_000:
                broker.check_alive()
        while p.flush(1.0):
            broker.check_alive()
            if clock() - t0 > FLUSH_TIMEOUT:
                raise RuntimeError(f"records still unacknowledged after {FLUSH_TIMEOUT} s")
        seconds = clock() - t0
        client_cpu, broker_cpu = self_cpu_seconds() - cpu0, broker.cpu_seconds() - bcpu0
        others = system_busy_seconds() - sys0 - client_cpu - broker_cpu
        if profiler is not None:
            profiler.stop()
        if errors:
            raise RuntimeError(f"{len(errors)} sampled deliveries failed, first: {errors[0]}")
        windows = len(stats)  # wait for the stats window that covers the end of the run
        deadline = time.monotonic() + 3
        while len(stats) == windows and time.monotonic() < deadline:
            p.poll(0.1)
    finally:
        _close_producer(p)
    run = ProduceRun(
        n, seconds, client_cpu, broker_cpu, latencies, max(0.0, others), load=load_average()
    )
    run.note = note
    for k, v in _window_medians(stats).items():
        setattr(run, k, v)
    return run


def idle_latency(broker: BrokerProcess, n: int, args: argparse.Namespace) -> list[float]:
    """Closed loop: one record at a time, the next after its ack (linger.ms=5 included)."""
    p = Producer(producer_config(broker.bootstrap, args))
    out: list[float] = []
    acked: list[float] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"idle probe delivery failed: {err}")
        acked.append(time.perf_counter())

    try:
        p.list_topics(PROBE_TOPIC, timeout=30)
        for i in range(n):
            acked.clear()
            t0 = time.perf_counter()
            p.produce(PROBE_TOPIC, b"x" * VALUE_SIZE, b"%016d" % i, on_delivery=done)
            deadline = t0 + 30
            while not acked:
                p.poll(1.0)
                if time.perf_counter() > deadline:
                    raise RuntimeError("idle probe: no ack within 30 s")
            out.append(acked[0] - t0)
    finally:
        _close_producer(p)
    return out


def _close_producer(p: Producer) -> None:
    """Drop whatever is still queued (an error path), then destroy the client."""
    p.purge()
    p.flush(5)
    p.close()


# ---------------------------------------------------------------------------- one repeat


def _topic_configs(args: argparse.Namespace) -> dict[str, str]:
    return {"segment.bytes": str(args.segment_bytes)} if args.segment_bytes else {}


class Servers:
    """The brokers of one benchmark, each started once and kept for every run: sparklog
    (a fresh data dir) and, unless ``--no-kafka``, Apache Kafka 4.3.1 in each flavour of
    ``KAFKA_FLAVOURS`` (KRaft, one node, a fresh log dir). Kept warm on purpose: a JVM's
    first million records run partly interpreted, and the issue's figures are of a warm
    Kafka. Each measured run writes a topic of its own, so runs do not share a log."""

    def __init__(self, args: argparse.Namespace, tmp: str) -> None:
        self.args = args
        self.data_dir = os.path.join(tmp, "sparklog-data")
        os.makedirs(self.data_dir)
        self.broker = BrokerProcess(self.data_dir)
        self.kafkas: dict[str, Any] = {}
        self._stack = contextlib.ExitStack()
        self.runs = 0

    def __enter__(self) -> Servers:
        self.broker.start()
        self._stack.callback(self._stop_broker)
        if not self.args.no_kafka:
            from _kafka import KafkaServer

            for label, flush in KAFKA_FLAVOURS:
                work_dir = os.path.join(self.data_dir, "..", f"kafka-{flush or 0}")
                os.makedirs(work_dir)
                self.kafkas[label] = self._stack.enter_context(
                    KafkaServer(work_dir, flush_messages=flush)
                )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _stop_broker(self) -> None:
        rc = self.broker.stop()
        self.broker.kill()
        if rc != 0:
            print(f"    broker exited with status {rc}: " + " | ".join(self.broker.lines[-5:]))

    def topic(self) -> str:
        self.runs += 1
        return f"{TOPIC}-{self.runs}"

    def sparklog(
        self, work: Workload, *, capture: bool = False, profile: str | None = None
    ) -> tuple[ProduceRun, list[bytes], str]:
        """One run on the sparklog broker, into a new topic; checks that the stored logs
        hold exactly the records sent. Returns (run, the rebuilt wire batches if
        ``capture``, the profile summary if ``profile``)."""
        args, broker = self.args, self.broker
        topic = self.topic()
        create_topic(broker.bootstrap, topic, args.partitions, _topic_configs(args))
        profiler = Profiler(broker.pid, profile, rate=args.profile_rate) if profile else None
        try:
            run = produce_records(broker, topic, args.records, work, args, profiler)
        finally:
            if profiler is not None:
                profiler.stop()
        summary = summarize_profile(profile, run.seconds, run.records) if profile else ""
        for line in broker.errors():
            print(f"    broker: {line}")
        batches = stored_batches(self.data_dir, topic, args.partitions)
        stored = sum(b.num_rows for b in batches)
        if stored != args.records:
            raise AssertionError(f"the broker stored {stored} records, expected {args.records}")
        run.batch_records = [b.num_rows for b in batches]
        wire = rebuild_kafka_batches(batches) if capture else []
        return run, wire, summary

    def kafka(self, label: str, work: Workload) -> ProduceRun:
        kafka = self.kafkas[label]
        topic = self.topic()
        create_topic(kafka.bootstrap, topic, self.args.partitions, {})
        return produce_records(kafka, topic, self.args.records, work, self.args)

    def idle_probe(self) -> list[float]:
        create_topic(self.broker.bootstrap, PROBE_TOPIC, 1, {})
        return idle_latency(self.broker, self.args.idle_probe, self.args)


# ---------------------------------------------------------------------------- report


def _ms(x: float) -> str:
    return f"{x * 1000:,.1f}"


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def _charts_of(
    *, runs: list[ProduceRun], med_run: ProduceRun, kafka_runs: dict[str, list[ProduceRun]],
    n: int, repeat: int,
) -> None:  # fmt: skip
    """docs/img/produce-throughput.png (records/s, sparklog and each Kafka flavour) and
    docs/img/produce-latency.png (ack latency distributions of the median runs)."""
    import _charts

    medians = {"sparklog": med_run}
    for label, kruns in kafka_runs.items():
        medians[label] = sorted(kruns, key=lambda x: x.seconds)[len(kruns) // 2]
    labels = [k.replace("Apache Kafka 4.3.1", "Kafka 4.3.1").replace(", ", "\n")
              for k in medians]  # fmt: skip
    colors = [_charts.COLORS["sparklog"]] + [_charts.COLORS["peer"]] * (len(medians) - 1)
    note = f"{n:,} records of 116 B, acks=all, median of {repeat}; {platform.node()}"
    print(_charts.bars("produce-throughput.png", "Produce throughput, one confluent-kafka "
                       "producer", labels, [r.records_per_s for r in medians.values()],
                       "records/s", colors=colors, note=note))  # fmt: skip
    print(_charts.cdf("produce-latency.png", "Ack latency at full speed (produce() to "
                      "delivery report)", {k: [x * 1000 for x in r.latencies]
                                           for k, r in medians.items()}, "ms",
                      note=note))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--records", type=int, default=None, help="records per run (5,000,000)")
    p.add_argument("--repeat", type=int, default=None, help="runs; the median is reported (3)")
    p.add_argument("--quick", action="store_true", help="500,000 records, 1 repeat")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs on each broker first")
    p.add_argument("--sample-every", type=int, default=100, help="ack latency sample rate")
    p.add_argument("--queue-messages", type=int, default=1_000_000)
    p.add_argument("--queue-kbytes", type=int, default=2 * MIB)
    p.add_argument("--segment-bytes", type=int, default=None, help="topic segment.bytes")
    p.add_argument("--idle-probe", type=int, default=300, help="closed-loop records (0: skip)")
    p.add_argument("--tmp-dir", default=None, help="where temp dirs go (default: /tmp)")
    p.add_argument("--profile", metavar="PATH", help="extra run with py-spy; stacks to PATH")
    p.add_argument("--profile-rate", type=int, default=100)
    p.add_argument(
        "--no-kafka", action="store_true",
        help="skip the Apache Kafka peer runs (they need the jars of `make setup`)",
    )  # fmt: skip
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=60,
        help="before each measurement wait up to this many seconds for other processes to "
        "leave the CPUs idle (0: don't)",
    )
    args = p.parse_args(argv)
    args.records = args.records or (500_000 if args.quick else 5_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    cleanup_on_signals()
    started = time.perf_counter()
    load_start = load_average()

    print(f"sparklog broker produce benchmark (load average at start {load_start})")
    print(
        f"  python {platform.python_version()}, confluent-kafka {confluent_kafka.version()} "
        f"(librdkafka {confluent_kafka.libversion()[0]}), pyarrow {pa.__version__}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"  {args.records:,} records x {KEY_SIZE} B key + {VALUE_SIZE} B value, "
        f"{args.partitions} partitions, repeat {repeat} (median); acks=all linger.ms=5 "
        f"batch.size=1 MiB (capped at message.max.bytes=1,000,000) "
        f"queue.buffering.max.messages={args.queue_messages:,}"
    )
    print("  payload MB = key+value bytes, 10^6 B")

    work = make_workload()
    runs: list[ProduceRun] = []
    disk_s: list[float] = []
    cpu_s: list[float] = []
    wire: list[bytes] = []
    idle: list[float] = []
    profile_text = ""
    kafka_runs: dict[str, list[ProduceRun]] = {}
    with temp_dir("sparklog-bench-produce-", args.tmp_dir) as tmp, Servers(args, tmp) as srv:
        for w in range(args.warmup):  # not measured: page cache, allocator, a JIT-warm JVM
            wrun, _, _ = srv.sparklog(work)
            line = f"  warm-up {w + 1}/{args.warmup}: sparklog {_rate(wrun.records_per_s)}"
            for label in srv.kafkas:
                line += f", {label} {_rate(srv.kafka(label, work).records_per_s)}"
            print(line + " rec/s", flush=True)
        for r in range(repeat):
            # alternate which broker goes first, so that drift favours neither
            order = ["sparklog", *srv.kafkas]
            if r % 2:
                order.reverse()
            for who in order:
                wait_for_quiet(args.wait_quiet)
                if who != "sparklog":
                    krun = srv.kafka(who, work)
                    kafka_runs.setdefault(who, []).append(krun)
                    print(f"  run {r + 1}/{repeat}: {who} {_rate(krun.records_per_s)} rec/s "
                          f"({krun.seconds:.2f} s, broker CPU {krun.broker_cpu:.1f} s)",
                          flush=True)  # fmt: skip
                    continue
                run, got, _ = srv.sparklog(work, capture=r == 0)
                runs.append(run)
                wire = got or wire
                print(
                    f"  run {r + 1}/{repeat}: sparklog {_rate(run.records_per_s)} rec/s "
                    f"({run.seconds:.2f} s, client CPU {run.client_cpu:.1f} s, broker CPU "
                    f"{run.broker_cpu:.1f} s, other processes {run.others_cpu:.1f} s); "
                    f"load {run.load}" + (f"; {run.note}" if run.note else ""),
                    flush=True,
                )
            wait_for_quiet(args.wait_quiet)
            disk_s.append(run_disk(b"".join(wire), tmp))
            wait_for_quiet(args.wait_quiet)
            cpu_s.append(run_cpu(wire, args.records))
            print(f"  run {r + 1}/{repeat}: disk (a) {_rate(args.records / disk_s[-1])} rec/s, "
                  f"CPU (b) {_rate(args.records / cpu_s[-1])} rec/s", flush=True)  # fmt: skip
        if args.idle_probe:
            idle = srv.idle_probe()
        if args.profile:
            prun, _, profile_text = srv.sparklog(work, profile=args.profile)
            profile_text = (
                f"Profiled run (py-spy --native at {args.profile_rate} Hz attached, not part "
                f"of the medians): {_rate(prun.records_per_s)} rec/s, {prun.seconds:.2f} s; "
                f"collapsed stacks in {args.profile}\n" + profile_text
            )

    med_run = sorted(runs, key=lambda x: x.seconds)[len(runs) // 2]
    disk = statistics.median(disk_s)
    cpu = statistics.median(cpu_s)
    n = args.records
    wire_bytes = sum(len(b) for b in wire)
    lat = med_run.latencies
    rows = [
        [
            "sparklog broker (confluent-kafka, acks=all)",
            _rate(med_run.records_per_s),
            f"{med_run.mb_per_s:,.1f}",
            f"{med_run.seconds:.2f}",
            f"{med_run.broker_cpu / n * 1e6:.2f}",
        ],
        [
            "(a) disk: write + fdatasync per 1 MiB",
            _rate(n / disk),
            f"{n * RECORD_PAYLOAD / MB / disk:,.1f}",
            f"{disk:.2f}",
            "",
        ],
        [
            "(b) CPU: decode_batch -> Arrow, 1 core",
            _rate(n / cpu),
            f"{n * RECORD_PAYLOAD / MB / cpu:,.1f}",
            f"{cpu:.2f}",
            f"{cpu / n * 1e6:.2f}",
        ],
    ]
    for label, kruns in kafka_runs.items():
        k = sorted(kruns, key=lambda x: x.seconds)[len(kruns) // 2]
        rows.append([
            f"{label} (confluent-kafka, acks=all)", _rate(k.records_per_s),
            f"{k.mb_per_s:,.1f}", f"{k.seconds:.2f}", f"{k.broker_cpu / n * 1e6:.2f}",
        ])  # fmt: skip
    print()
    print(f"Summary (median of {repeat}; {n:,} records, {wire_bytes / MB:,.1f} MB of batches)")
    print(fmt_table(["", "records/s", "MB/s", "seconds", "CPU us/rec"], rows))
    print()
    for label, kruns in kafka_runs.items():
        k = sorted(kruns, key=lambda x: x.seconds)[len(kruns) // 2]
        lat_k = sorted(k.latencies)
        print(
            f"  sparklog / {label}: records/s {med_run.records_per_s / k.records_per_s:.3f}, "
            f"broker CPU per record {med_run.broker_cpu / k.broker_cpu:.3f}; its ack p50/p99 "
            f"{_ms(percentile(lat_k, 0.5))}/{_ms(percentile(lat_k, 0.99))} ms"
        )
    ratio_b = med_run.records_per_s / (n / cpu)
    print(f"  broker / (a) disk     {med_run.records_per_s / (n / disk):.3f}")
    verdict = "met" if ratio_b >= CPU_TARGET else "NOT met"
    print(f"  broker / (b) CPU      {ratio_b:.3f}   (target >= {CPU_TARGET}: {verdict})")
    print(
        f"  (b) CPU per record / broker CPU per record  {cpu / med_run.broker_cpu:.3f}   "
        "(the broker's own efficiency vs the codec alone, whatever the client takes)"
    )
    for name, anchor in (
        ("floor, this 2-core machine", FLOOR),
        ("Kafka's published single producer, 6 cores", KAFKA_PUBLISHED),
        ("goal", GOAL),
    ):
        print(f"  broker / {anchor:>9,} rec/s ({name})  {med_run.records_per_s / anchor:.3f}")
    print()
    print(
        f"Ack latency (median run, {len(lat):,} samples, every {args.sample_every}th record): "
        f"p50 {_ms(percentile(lat, 0.5))} ms, p99 {_ms(percentile(lat, 0.99))} ms, "
        f"max {_ms(max(lat) if lat else float('nan'))} ms"
    )
    print(
        f"  of which queued in the producer (librdkafka int_latency p50): "
        f"{med_run.queue_p50_ms:,.1f} ms; produce request round trip (librdkafka rtt, "
        f"median of 1 s windows): p50 {med_run.rtt_p50_ms:,.1f} ms, "
        f"p99 {med_run.rtt_p99_ms:,.1f} ms"
    )
    if idle:
        print(
            f"  idle, one record at a time ({len(idle)} records, linger.ms=5 included): "
            f"p50 {_ms(percentile(idle, 0.5))} ms, p99 {_ms(percentile(idle, 0.99))} ms"
        )
    counts = med_run.batch_records
    print(
        f"Produce batches (median run): {len(counts):,}, records per batch median "
        f"{statistics.median(counts):,.0f} (min {min(counts):,}, max {max(counts):,})"
    )
    print(
        f"CPU seconds (median run): producer client {med_run.client_cpu:.2f} "
        f"({med_run.client_cpu / n * 1e6:.2f} us/record), broker {med_run.broker_cpu:.2f} "
        f"({med_run.broker_cpu / n * 1e6:.2f} us/record), other processes "
        f"{med_run.others_cpu:.2f}, of {(os.cpu_count() or 1) * med_run.seconds:.1f} "
        f"core-seconds available"
    )
    if profile_text:
        print()
        print(profile_text)
    _charts_of(runs=runs, med_run=med_run, kafka_runs=kafka_runs, n=n, repeat=repeat)
    print()
    print(
        f"Load average at start {load_start}, at end {load_average()}; "
        f"total {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
