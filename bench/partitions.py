"""Many partitions on one broker, local disk, beside Apache Kafka: ``bench/partitions.py``.

For each ``--partitions`` count (4, 100, 2,000 by default; the first is the base), on a
sparklog broker and on Apache Kafka 4.3.1 (``bench/_kafka.py``; default flush policy, and
unless ``--no-flush`` also ``flush.messages=1``, an fsync before each ack as sparklog
acks), each started once and warmed up by one unmeasured run: a topic of that many
partitions is created, every partition gets one record (a broker opens a partition at its
first write; not measured), then ``bench/produce.py``'s workload (one confluent-kafka
producer, 16-byte keys from a pool of 64,000, 100-byte values, acks=all, linger.ms=5,
batch.size 1 MiB, no idempotence) writes ``--records`` records, spread over the
partitions by key. Same bytes at every count: the ratio to the base count is what a
partition costs.

Printed per broker and count: records/s and its ratio to the base count, the broker's
CPU per record, its open files (``/proc/PID/fd``) and resident memory after the run. And
memory per idle partition: the broker's resident set after the topic's partitions were
opened by their first record, less before, divided by the count (sparklog's cyclic
collector runs first; Kafka's JVM heap is what it is, so its figure is the process's).

    .venv/bin/python bench/partitions.py                       # 4, 100, 2,000
    .venv/bin/python bench/partitions.py --partitions 4,500 --records 500000 --no-kafka
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import produce
from _broker import cleanup_on_signals, temp_dir
from _machine import load_average
from _tables import fmt_table
from object_storage import open_partitions
from produce import Servers, Workload, create_topic, make_workload, produce_records

#: distinct keys: enough that every one of 2,000 partitions gets records
KEYS = 64_000


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one_count(
    srv: Servers, who: str, count: int, work: Workload, args: argparse.Namespace
) -> dict[str, Any]:
    """A topic of ``count`` partitions on ``who``: opened, then written; its figures."""
    server: Any = srv.broker if who == "sparklog" else srv.kafkas[who]
    topic = f"parts-{count}-{srv.topic()}"
    create_topic(server.bootstrap, topic, count, {})
    rss0, files0 = resident_mb(server.pid), open_files(server.pid)
    opened = open_partitions(server.bootstrap, topic, count, None)
    time.sleep(1.0)  # let the broker settle (sparklog: its collector; Kafka: its threads)
    rss1, files1 = resident_mb(server.pid), open_files(server.pid)
    run = produce_records(server, topic, args.records, work, args)
    return {
        "rate": run.records_per_s,
        "cpu": run.broker_cpu / args.records * 1e6,
        "files_idle": files1 - files0,
        "files": open_files(server.pid) - files0,
        "idle_kb": (rss1 - rss0) * 1024 / count,
        "rss": resident_mb(server.pid),
        "opened": opened,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--partitions", default="4,100,2000", help="partition counts (first: base)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--no-flush", action="store_true", help="skip Kafka with flush.messages=1")
    ap.add_argument("--tmp-dir", default=None)
    args = ap.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    cleanup_on_signals()
    produce.FLUSH_TIMEOUT = 1800
    if args.no_flush:
        produce.KAFKA_FLAVOURS = produce.KAFKA_FLAVOURS[:1]
    # what produce.Servers and produce_records read of the produce benchmark's options
    args.queue_messages, args.queue_kbytes = 1_000_000, 2 * 1024 * 1024
    args.sample_every, args.wait_quiet = 1000, 0.0
    work = make_workload(keys=KEYS)
    started = time.perf_counter()
    print(f"many partitions, local disk: {args.records:,} records per run, counts {counts}; "
          f"load average {load_average()}")  # fmt: skip
    results: dict[tuple[str, int], dict[str, Any]] = {}
    with temp_dir("sparklog-bench-partitions-", args.tmp_dir) as tmp, Servers(args, tmp) as srv:
        brokers = ["sparklog", *srv.kafkas]
        for who in brokers:  # warm-up: not measured
            one_count(srv, who, counts[0], work, args)
        for count in counts:
            for who in brokers:
                r = results[(who, count)] = one_count(srv, who, count, work, args)
                print(f"  {who}, {count:,} partitions: {r['rate']:,.0f} rec/s, "
                      f"{r['files']} more open files, {r['idle_kb']:.1f} KiB per idle "
                      f"partition; {r['opened']}", flush=True)  # fmt: skip
    rows = []
    for who in dict.fromkeys(w for w, _ in results):
        base = results[(who, counts[0])]["rate"]
        for count in counts:
            r = results[(who, count)]
            rows.append([
                who, f"{count:,}", f"{r['rate']:,.0f}", f"{r['rate'] / base:.2f}",
                f"{r['cpu']:.2f}", str(r["files_idle"]), str(r["files"]),
                f"{r['files'] / count:.2f}", f"{r['idle_kb']:.1f}", f"{r['rss']:,.0f}",
            ])  # fmt: skip
    print()
    print(fmt_table(["broker", "partitions", "records/s", f"/ {counts[0]}", "CPU us/rec",
                     "files idle", "files", "per partition", "KiB/idle partition",
                     "RSS MB"], rows))  # fmt: skip
    for count in counts:
        s, k = results.get(("sparklog", count)), results.get(("Apache Kafka 4.3.1", count))
        if s and k:
            print(f"  sparklog / Kafka at {count:,} partitions: {s['rate'] / k['rate']:.2f}")
    print(f"\nload average {load_average()}; total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
