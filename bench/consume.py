"""Broker consume benchmark: a confluent-kafka consumer reading a 4-partition topic from a
sparklog broker process, with an in-run CPU baseline.

Data: ``--records`` records (16-byte keys, 100-byte values) produced by ``bench/produce.py``'s
producer into a fresh data dir, or an existing ``--data-dir`` whose topic already holds
them (kept afterwards; a temp data dir is deleted). Each repeat a new consumer
(``assign()`` at the beginning of every partition, no consumer group, no commits) reads
until it has ``--records`` records; timed from the first ``consume()`` call to the last
record. The broker serves them from its page-cache-warm segments.

Baseline (b) CPU, single core, no network: what the broker's fetch path does per record,
alone: read the stored Arrow batches of every partition (``LogView.read``, in
``--partition-fetch-bytes`` slices, as the broker does per fetch) and encode them as Kafka
record batches with ``sparklog.kafka.records.encode_batches``.

Payload MB = key + value bytes (116 per record), 1 MB = 10^6 bytes. CPU seconds of the
consumer, the broker and every other process during a run are reported; before each
measurement the script waits up to ``--wait-quiet`` seconds for the CPUs to be idle.
``--profile PATH`` adds an unmeasured consume run with py-spy attached to the broker (see
``bench/produce.py``).

The peer (``--no-kafka`` skips it): Apache Kafka 4.3.1 (``bench/_kafka.py``, single-node
KRaft from the jars ``make setup`` fetches) in the same run: the same records produced into
the same number of partitions by the same producer, then read by consumers with the same
settings, warm-up and repeats as above (Kafka serves them from the page cache too). The
summary prints sparklog / Kafka for records/s and broker CPU per record.

    .venv/bin/python bench/consume.py --quick       # 500k records, 1 repeat
    .venv/bin/python bench/consume.py               # 5M records, median of 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
import uuid
from dataclasses import dataclass

import confluent_kafka
import pyarrow as pa
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _machine import load_average, self_cpu_seconds, system_busy_seconds, wait_for_quiet
from _profile import Profiler, summarize_profile
from _tables import fmt_table
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from produce import RECORD_PAYLOAD, TOPIC, create_topic, make_workload, produce_records

from sparklog.errors import SparkLogError
from sparklog.kafka.records import encode_batches
from sparklog.storage import Storage

MB = 1_000_000
MIB = 1024 * 1024


@dataclass
class ConsumeRun:
    records: int
    seconds: float
    client_cpu: float
    broker_cpu: float
    others_cpu: float  # CPU seconds other processes used meanwhile (concurrent test suites)
    load: str
    note: str = ""  # from wait_for_quiet

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_PAYLOAD / MB / self.seconds


def stored_records(data_dir: str, topic: str) -> tuple[int, int]:
    """(partitions, records) of ``topic`` in a data dir; (0, 0) if there is no such topic."""
    storage = Storage(data_dir)
    try:
        meta = storage.topics.get(topic)
    except (SparkLogError, FileNotFoundError):
        return 0, 0
    total = 0
    for p in range(meta.partitions):
        with contextlib.suppress(SparkLogError):
            total += storage.reader(topic, p).view().high_watermark
    return meta.partitions, total


def consumer_config(bootstrap: str, args: argparse.Namespace) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.max.bytes": args.fetch_max_bytes,
        "max.partition.fetch.bytes": args.partition_fetch_bytes,
        "receive.message.max.bytes": max(100_000_000, args.fetch_max_bytes + MIB),
        # prefetch: librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s)
        # once queued.min.messages (100,000) are waiting; a 8 MiB fetch brings ~50,000
        "queued.max.messages.kbytes": args.queued_kbytes,
        "queued.min.messages": 1_000_000,
        "fetch.queue.backoff.ms": 10,
    }


def consume_records(
    broker: BrokerProcess,
    n: int,
    partitions: int,
    args: argparse.Namespace,
    profiler: Profiler | None = None,
) -> ConsumeRun:
    c = Consumer(consumer_config(broker.bootstrap, args))
    try:
        c.list_topics(TOPIC, timeout=30)  # connected, metadata known: not timed
        note = wait_for_quiet(args.wait_quiet)
        if profiler is not None:
            profiler.start()
        clock = time.perf_counter
        cpu0, bcpu0, sys0 = self_cpu_seconds(), broker.cpu_seconds(), system_busy_seconds()
        t0 = last_progress = clock()
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = 0
        consume = c.consume
        while count < n:
            msgs = consume(10_000, 1.0)
            if msgs:
                for m in msgs:
                    if m.error() is not None:
                        raise RuntimeError(f"consume error: {m.error()}")
                count += len(msgs)
                last_progress = clock()
            else:
                broker.check_alive()
                if clock() - last_progress > 60:
                    raise RuntimeError(f"no records for 60 s after {count:,} of {n:,}")
        seconds = last_progress - t0
        client_cpu, broker_cpu = self_cpu_seconds() - cpu0, broker.cpu_seconds() - bcpu0
        others = max(0.0, system_busy_seconds() - sys0 - client_cpu - broker_cpu)
    finally:
        if profiler is not None:
            profiler.stop()
        c.close()
    return ConsumeRun(count, seconds, client_cpu, broker_cpu, others, load_average(), note)


def run_cpu(data_dir: str, partitions: int, slice_bytes: int) -> tuple[float, int, int]:
    """Baseline (b): read + encode every stored record as the fetch path does; returns
    (seconds, records, encoded bytes)."""
    storage = Storage(data_dir)
    views = [storage.reader(TOPIC, p).view() for p in range(partitions)]
    records = encoded = 0
    t0 = time.perf_counter()
    for view in views:
        offset, end = view.log_start_offset, view.high_watermark
        while offset < end:
            batches = view.read(offset, max_bytes=slice_bytes)
            n = sum(b.num_rows for b in batches)
            if not n:
                raise AssertionError(f"read at offset {offset} returned nothing")
            encoded += len(encode_batches(batches))
            records += n
            offset += n
    return time.perf_counter() - t0, records, encoded


def kafka_consume(
    args: argparse.Namespace, tmp: str, partitions: int, n: int, repeat: int
) -> list[ConsumeRun]:
    """The peer: ``n`` records produced into Apache Kafka 4.3.1 (same producer, same
    partitions), then read ``repeat`` times after a warm-up, as from sparklog."""
    from _kafka import KafkaServer

    runs = []
    with temp_dir("kafka-data-", tmp) as work_dir, KafkaServer(work_dir) as kafka:
        create_topic(kafka.bootstrap, TOPIC, partitions, {})
        prun = produce_records(kafka, TOPIC, n, make_workload(), args)  # type: ignore[arg-type]
        print(f"  Apache Kafka 4.3.1: produced {n:,} records: {_rate(prun.records_per_s)} rec/s")
        consume_records(kafka, min(n, 100_000), partitions, args)  # type: ignore[arg-type]
        for r in range(repeat):
            run = consume_records(kafka, n, partitions, args)  # type: ignore[arg-type]
            runs.append(run)
            print(
                f"  Kafka run {r + 1}/{repeat}: consumer {_rate(run.records_per_s)} rec/s "
                f"({run.seconds:.2f} s, client CPU {run.client_cpu:.1f} s, broker CPU "
                f"{run.broker_cpu:.1f} s, other processes {run.others_cpu:.1f} s); "
                f"load {run.load}" + (f"; {run.note}" if run.note else ""),
                flush=True,
            )
    return runs


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--records", type=int, default=None, help="records per run (5,000,000)")
    p.add_argument("--repeat", type=int, default=None, help="runs; the median is reported (3)")
    p.add_argument("--quick", action="store_true", help="500,000 records, 1 repeat")
    p.add_argument("--partitions", type=int, default=4, help="when producing the data")
    p.add_argument(
        "--data-dir",
        help="reuse (and keep) this broker data dir; produce into it if its topic is missing",
    )
    p.add_argument("--tmp-dir", default=None, help="where temp dirs go (default: /tmp)")
    p.add_argument("--fetch-max-bytes", type=int, default=64 * MIB)
    p.add_argument("--partition-fetch-bytes", type=int, default=8 * MIB)
    p.add_argument("--queued-kbytes", type=int, default=256 * 1024, help="consumer prefetch")
    p.add_argument("--segment-bytes", type=int, default=None, help="topic segment.bytes")
    p.add_argument("--no-kafka", action="store_true", help="skip the Apache Kafka peer")
    p.add_argument("--profile", metavar="PATH", help="extra run with py-spy; stacks to PATH")
    p.add_argument("--profile-rate", type=int, default=100)
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=60,
        help="before each measurement wait up to this many seconds for other processes to "
        "leave the CPUs idle (0: don't)",
    )
    # used by produce_records when the data has to be produced first
    p.add_argument("--queue-messages", type=int, default=1_000_000, help=argparse.SUPPRESS)
    p.add_argument("--queue-kbytes", type=int, default=2 * MIB, help=argparse.SUPPRESS)
    p.add_argument("--sample-every", type=int, default=1000, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    n = args.records = args.records or (500_000 if args.quick else 5_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    cleanup_on_signals()
    started = time.perf_counter()
    load_start = load_average()

    print(f"sparklog broker consume benchmark (load average at start {load_start})")
    print(
        f"  python {platform.python_version()}, confluent-kafka {confluent_kafka.version()} "
        f"(librdkafka {confluent_kafka.libversion()[0]}), pyarrow {pa.__version__}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"  {n:,} records, repeat {repeat} (median); fetch.max.bytes={args.fetch_max_bytes:,} "
        f"max.partition.fetch.bytes={args.partition_fetch_bytes:,} "
        f"queued.max.messages.kbytes={args.queued_kbytes:,}"
    )
    print("  payload MB = key+value bytes (116 per record), 10^6 B")

    runs: list[ConsumeRun] = []
    cpu_s: list[float] = []
    encoded_bytes = 0
    profile_text = ""
    with temp_dir("sparklog-bench-consume-", args.tmp_dir) as tmp:
        data_dir = args.data_dir or os.path.join(tmp, "data")
        partitions, have = stored_records(data_dir, TOPIC)
        broker = BrokerProcess(data_dir)
        try:
            broker.start()
            if not partitions:
                partitions = args.partitions
                configs = {"segment.bytes": str(args.segment_bytes)} if args.segment_bytes else {}
                create_topic(broker.bootstrap, TOPIC, partitions, configs)
                prun = produce_records(broker, TOPIC, n, make_workload(), args)
                have = n
                print(
                    f"  produced {n:,} records into {data_dir}: {_rate(prun.records_per_s)} rec/s",
                    flush=True,
                )
            elif have < n:
                raise SystemExit(f"{data_dir}: topic {TOPIC!r} holds {have:,} records, not {n:,}")
            else:
                print(f"  reusing {data_dir}: {have:,} records in {partitions} partitions")
            consume_records(broker, min(n, 100_000), partitions, args)  # warm-up, not counted
            for r in range(repeat):
                run = consume_records(broker, n, partitions, args)
                runs.append(run)
                wait_for_quiet(args.wait_quiet)
                seconds, got, encoded_bytes = run_cpu(
                    data_dir, partitions, args.partition_fetch_bytes
                )
                if got != have:
                    raise AssertionError(f"baseline read {got:,} records, expected {have:,}")
                cpu_s.append(seconds)
                print(
                    f"  run {r + 1}/{repeat}: consumer {_rate(run.records_per_s)} rec/s "
                    f"({run.seconds:.2f} s, client CPU {run.client_cpu:.1f} s, broker CPU "
                    f"{run.broker_cpu:.1f} s, other processes {run.others_cpu:.1f} s), "
                    f"CPU (b) {_rate(have / seconds)} rec/s; "
                    f"load {run.load}" + (f"; {run.note}" if run.note else ""),
                    flush=True,
                )
            if args.profile:
                profiler = Profiler(broker.pid, args.profile, rate=args.profile_rate)
                prun2 = consume_records(broker, n, partitions, args, profiler)
                profile_text = (
                    f"Profiled run (py-spy --native at {args.profile_rate} Hz attached, not "
                    f"part of the medians): {_rate(prun2.records_per_s)} rec/s, "
                    f"{prun2.seconds:.2f} s; collapsed stacks in {args.profile}\n"
                    + summarize_profile(args.profile, prun2.seconds, prun2.records)
                )
            for line in broker.errors():
                print(f"    broker: {line}")
        finally:
            rc = broker.stop()
            broker.kill()
        if rc != 0:
            print(f"    broker exited with status {rc}: " + " | ".join(broker.lines[-5:]))

        kafka_runs = [] if args.no_kafka else kafka_consume(args, tmp, partitions, have, repeat)

    med = sorted(runs, key=lambda x: x.seconds)[len(runs) // 2]
    cpu = statistics.median(cpu_s)
    rows = [
        [
            "sparklog broker -> confluent-kafka consumer",
            _rate(med.records_per_s),
            f"{med.mb_per_s:,.1f}",
            f"{med.seconds:.2f}",
            f"{med.broker_cpu / med.records * 1e6:.2f}",
        ],
        [
            "(b) CPU: read Arrow + encode_batches, 1 core",
            _rate(have / cpu),
            f"{have * RECORD_PAYLOAD / MB / cpu:,.1f}",
            f"{cpu:.2f}",
            f"{cpu / have * 1e6:.2f}",
        ],
    ]
    if kafka_runs:
        k = sorted(kafka_runs, key=lambda x: x.seconds)[len(kafka_runs) // 2]
        rows.append([
            "Apache Kafka 4.3.1 -> confluent-kafka consumer", _rate(k.records_per_s),
            f"{k.mb_per_s:,.1f}", f"{k.seconds:.2f}", f"{k.broker_cpu / k.records * 1e6:.2f}",
        ])  # fmt: skip
    print()
    print(
        f"Summary (median of {repeat}; {med.records:,} records read of {have:,} stored; "
        f"{encoded_bytes / MB:,.1f} MB as Kafka batches)"
    )
    print(fmt_table(["", "records/s", "MB/s", "seconds", "CPU us/rec"], rows))
    print()
    print(f"  consumer / (b) CPU    {med.records_per_s / (have / cpu):.3f}")
    if kafka_runs:
        print(
            f"  sparklog / Apache Kafka 4.3.1: records/s {med.records_per_s / k.records_per_s:.3f}"
            f", broker CPU per record "
            f"{(med.broker_cpu / med.records) / (k.broker_cpu / k.records):.3f}"
        )
    print(
        f"  (b) CPU per record / broker CPU per record  "
        f"{(cpu / have) / (med.broker_cpu / med.records):.3f}"
    )
    print(
        f"CPU seconds (median run): consumer client {med.client_cpu:.2f} "
        f"({med.client_cpu / med.records * 1e6:.2f} us/record), broker {med.broker_cpu:.2f} "
        f"({med.broker_cpu / med.records * 1e6:.2f} us/record), other processes "
        f"{med.others_cpu:.2f}, of {(os.cpu_count() or 1) * med.seconds:.1f} "
        f"core-seconds available"
    )
    if profile_text:
        print()
        print(profile_text)
    print()
    print(
        f"Load average at start {load_start}, at end {load_average()}; "
        f"total {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
