"""Many partitions on S3, by the broker's pipelined-request limit: ``bench/s3_inflight.py``.

librdkafka puts one partition in each produce request (librdkafka#1700), and on object
storage a request waits for the next flush round: only requests that are in the broker at
the same time share a round, so the number a connection may have in flight bounds how many
partitions one round carries. This runs ``bench/produce.py``'s workload (16-byte keys,
100-byte values, acks=all, linger.ms=5, batch.size 1 MiB, no idempotence, a 1M-record
producer queue) against one embedded broker with its log on SeaweedFS (``--flush-ms``,
default 100) for each ``--inflight`` value (the broker's ``max_inflight_requests``) and
``--partitions`` count, after a first write to every partition (a broker opens a
partition at its first write; the time that took is printed), and prints records/s, the
broker's CPU and the object-store requests of the measured run, and each setup's ratio to
the first partition count at the same in-flight limit.

What bounds it: per round at most ``--inflight`` partition-batches per connection, each
as large as the records the producer queued for that partition meanwhile (the producer's
queue spread over the partitions); then the 2 cores shared by producer, broker and
SeaweedFS. An idempotent librdkafka producer keeps at most 5 requests in flight whatever
the broker allows (not measured here).

    .venv/bin/python bench/s3_inflight.py                         # 8 and 2048, 4 and 2,000
    .venv/bin/python bench/s3_inflight.py --inflight 8,256,2048 --records 1200000
"""

from __future__ import annotations

import argparse
import os
import sys

import produce
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _seaweed import SeaweedServer
from object_storage import Run, open_partitions
from produce import create_topic, make_workload, produce_records

TOPIC = "inflight"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inflight", default="8,2048", help="max_inflight_requests values")
    ap.add_argument("--partitions", default="4,2000", help="partition counts (first: base)")
    ap.add_argument("--records", type=int, default=1_200_000)
    ap.add_argument("--flush-ms", type=int, default=100)
    args = ap.parse_args()
    inflights = [int(x) for x in args.inflight.split(",")]
    counts = [int(x) for x in args.partitions.split(",")]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cleanup_on_signals()
    produce.FLUSH_TIMEOUT = 1800  # thousands of partitions at 8 in flight take minutes
    work = make_workload()
    pargs = argparse.Namespace(
        queue_messages=1_000_000, queue_kbytes=2 * 1024 * 1024, sample_every=1000, wait_quiet=0.0
    )
    rows: list[tuple[int, int, float, float, dict[str, int]]] = []
    with temp_dir("sparklog-bench-inflight-") as tmp, SeaweedServer(os.path.join(tmp, "s3")) as s3:
        os.environ.update(s3.env())
        run = Run(s3, tmp, args)
        for inflight in inflights:
            conf = os.path.join(tmp, f"broker-{inflight}.toml")
            with open(conf, "w") as f:
                f.write(f"[broker]\nmax_inflight_requests = {inflight}\n")
            for count in counts:
                cache = run.dir("cache")
                extra = ("--cache-dir", cache, "--flush-ms", str(args.flush_ms), "--config", conf)
                with BrokerProcess(run.uri(), extra=extra) as broker:
                    create_topic(broker.bootstrap, TOPIC, count, {})
                    print(f"  {open_partitions(broker.bootstrap, TOPIC, count, None)}", flush=True)
                    before = s3.requests()
                    r = produce_records(broker, TOPIC, args.records, work, pargs)
                    used = dict(s3.requests() - before)
                cpu = r.broker_cpu / r.seconds
                rows.append((inflight, count, r.records_per_s, cpu, used))
                rate = r.records_per_s
                print(
                    f"  in flight {inflight:>5}, {count:>5} partitions: {rate:>10,.0f} "
                    f"records/s, broker CPU {cpu:.2f} cores, requests {used}",
                    flush=True,
                )
    print(f"\nbench/s3_inflight.py  {args.records:,} records, flush {args.flush_ms} ms")
    base_label = f"vs {counts[0]}"
    print(
        f"{'in flight':>9} {'partitions':>10} {'records/s':>11} {base_label:>8} {'broker CPU':>10}"
    )
    for inflight, count, rate, cpu, _used in rows:
        base = next(r for i, c, r, _, _ in rows if i == inflight and c == counts[0])
        print(f"{inflight:>9} {count:>10,} {rate:>11,.0f} {rate / base:>7.2f}x {cpu:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
