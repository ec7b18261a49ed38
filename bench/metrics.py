"""Metrics benchmark: produce throughput with ``/metrics`` on (and scraped every second)
against metrics off, same workload, same run.

Each repeat runs two brokers one after the other, in fresh data dirs, in alternating
order: one without ``--metrics``, one with ``--metrics`` while a thread scrapes
``/metrics`` every ``--scrape-every`` seconds during the produce. Producing is
``bench/produce.py``'s workload: one confluent-kafka producer, acks=all, linger.ms=5,
1 MiB batches, 116-byte records to 4 partitions, timed to the last ack. The topic has a
consumer group with commits on every partition, so each scrape computes lag. The figure
is the median records/s of each kind and their ratio (issue 19's target: >= 0.97),
broker CPU per record of each, and how long the scrapes under load took.

Writes ``docs/img/metrics-throughput.png`` (records/s, on vs off) and
``docs/img/metrics-scrapes.png`` (the scrape times' distribution under load).

    .venv/bin/python bench/metrics.py --quick     # 500k records, 1 repeat
    .venv/bin/python bench/metrics.py             # 3M records, median of 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
import urllib.request

import _charts
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _machine import load_average
from _tables import fmt_table
from produce import (
    MIB,
    TOPIC,
    create_topic,
    make_workload,
    produce_records,
)

from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient


class Scraper:
    """Scrapes ``url`` every ``every`` seconds on a thread; records each scrape's time."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every = url, every
        self.times: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=30) as resp:
                    resp.read()
                self.times.append(time.perf_counter() - t0)
            except OSError:
                self.failures += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def one_run(args: argparse.Namespace, tmp: str, metrics: bool) -> tuple[float, float, list[float]]:
    """(records/s, broker CPU µs per record, scrape seconds) of one broker run."""
    os.sync()
    with temp_dir("metrics-data-", tmp) as data_dir:
        broker = BrokerProcess(data_dir, metrics=metrics)
        try:
            broker.start()
            create_topic(broker.bootstrap, TOPIC, args.partitions, {})
            with KafkaClient(broker.bootstrap) as c:  # a group to compute lag for
                every = {(TOPIC, p): 0 for p in range(args.partitions)}
                admin.commit_offsets(c, "bench-group", every)
            cpu0 = broker.cpu_seconds()
            if metrics:
                with Scraper(broker.metrics_url, args.scrape_every) as s:
                    run = produce_records(broker, TOPIC, args.records, make_workload(), args)
                scrapes, failures = s.times, s.failures
                if failures:
                    raise RuntimeError(f"{failures} scrapes failed")
            else:
                run = produce_records(broker, TOPIC, args.records, make_workload(), args)
                scrapes = []
            cpu = broker.cpu_seconds() - cpu0
        finally:
            broker.stop()
            broker.kill()
    return run.records_per_s, cpu / args.records * 1e6, scrapes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--records", type=int, default=None, help="records per run (3,000,000)")
    p.add_argument("--repeat", type=int, default=None, help="runs of each kind (5)")
    p.add_argument("--quick", action="store_true", help="500,000 records, 1 repeat")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes")
    p.add_argument("--sample-every", type=int, default=1000)
    p.add_argument("--queue-messages", type=int, default=1_000_000)
    p.add_argument("--queue-kbytes", type=int, default=2 * MIB)
    p.add_argument("--wait-quiet", type=float, default=30)
    p.add_argument("--tmp-dir", default=None)
    args = p.parse_args(argv)
    args.records = args.records or (500_000 if args.quick else 3_000_000)
    repeat = args.repeat or (1 if args.quick else 5)
    cleanup_on_signals()
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    scrapes: list[float] = []
    with temp_dir("sparklog-bench-metrics-", args.tmp_dir) as tmp:
        one_run(args, tmp, True)  # warm-up (page cache, imports): not counted
        for r in range(repeat):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for kind in order:
                rate, cpu, s = one_run(args, tmp, kind == "on")
                rates[kind].append(rate)
                cpus[kind].append(cpu)
                scrapes += s
                print(f"  run {r + 1} metrics {kind}: {rate:,.0f} records/s, broker "
                      f"{cpu:.2f} µs CPU/record" + (f", {len(s)} scrapes" if s else ""),
                      flush=True)  # fmt: skip
    med = {k: statistics.median(v) for k, v in rates.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
    ratio = med["on"] / med["off"]
    scrapes.sort()
    p50 = scrapes[len(scrapes) // 2] if scrapes else float("nan")
    p99 = scrapes[min(len(scrapes) - 1, int(len(scrapes) * 0.99))] if scrapes else float("nan")
    print(f"\n{platform.node()} {os.cpu_count()} cores, load {load_average()}, "
          f"{args.records:,} records a run, median of {repeat}")  # fmt: skip
    rows = [[k, f"{med[k]:,.0f}", f"{cpu_med[k]:.2f}"] for k in ("off", "on")]
    print(fmt_table(["metrics", "records/s", "broker µs CPU/record"], rows))
    print(f"on / off: {ratio:.3f} (target >= 0.97); scrapes under load: {len(scrapes)}, "
          f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {scrapes[-1] * 1000:.1f} ms"
          if scrapes else f"on / off: {ratio:.3f}")  # fmt: skip
    note = f"{args.records:,} records a run, median of {repeat}, acks=all; {platform.node()}"
    print(_charts.bars("metrics-throughput.png", f"Produce with /metrics off and on (ratio "
                       f"{ratio:.3f})", ["metrics off", "metrics on, scraped every "
                       f"{args.scrape_every:g} s"], [med["off"], med["on"]], "records/s",
                       colors=[_charts.COLORS["other"], _charts.COLORS["sparklog"]],
                       note=note))  # fmt: skip
    if scrapes:
        print(_charts.cdf("metrics-scrapes.png", "/metrics scrape time while produce runs at "
                          "full speed", {"scrape": [s * 1000 for s in scrapes]}, "ms",
                          note=note))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
