"""Apache Kafka's own performance tools against sparklog and Apache Kafka 4.3.1, one run.

The tools (Java, from the jars ``make setup`` fetches into ``.jars/kafka``), each run against
a sparklog broker process and a single-node KRaft Apache Kafka 4.3.1 (``bench/_kafka.py``)
twice - its default flush policy (acked from the page cache), and ``flush.messages=1`` (an
fsync before each ack, as sparklog acks) - all on loopback with fresh data dirs:

* ``org.apache.kafka.tools.ProducerPerformance``: ``--records`` records of 100 bytes (no
  key) into a 4-partition topic, ``acks=all``, as fast as the Java producer goes
  (``--throughput -1``), its default batching (``linger.ms`` 5, ``batch.size`` 16 KiB);
  reported: records/s, MB/s, average and p50/p99 send-to-ack latency, and the broker's CPU
  seconds per record.
* ``org.apache.kafka.tools.ConsumerPerformance``: a consumer group reading those records
  from the beginning; reported: records/s (fetch time, after the group join), MB/s and
  broker CPU per record.
* first, unmeasured, on each broker: ``--warmup`` records produced and consumed on a
  topic of their own (Kafka's JVM compiles its hot paths in the first million or so).
* ``org.apache.kafka.tools.EndToEndLatency``: ``--e2e-records`` round trips, one record at
  a time (produce with ``acks=all``, consume it back) on a 1-partition topic; p50/p99/p99.9.

The tools print their own figures; this script parses them and prints one table with the
ratios sparklog / Kafka.

    .venv/bin/python bench/kafka_tools.py --quick   # 500k records, 2,000 round trips
    .venv/bin/python bench/kafka_tools.py           # 5M records, 10,000 round trips
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _kafka import KafkaServer
from _machine import load_average
from _tables import fmt_table
from produce import create_topic

from sparklog.jars import kafka_classpath

TOOLS = "org.apache.kafka.tools."
PERF_TOPIC, E2E_TOPIC, WARM_TOPIC = "perf", "e2e", "warm-up"
MB = 1_000_000


@dataclass
class ToolFigures:
    """What the three tools measured against one broker."""

    produce_rps: float = 0.0
    produce_mbps: float = 0.0
    produce_avg_ms: float = 0.0
    produce_p50_ms: float = 0.0
    produce_p99_ms: float = 0.0
    produce_cpu_us: float = 0.0
    consume_rps: float = 0.0
    consume_mbps: float = 0.0
    consume_cpu_us: float = 0.0
    e2e_p50_ms: float = 0.0
    e2e_p99_ms: float = 0.0
    e2e_p999_ms: float = 0.0
    lines: list[str] = field(default_factory=list)


def tool(main: str, *args: str, timeout: float = 1800) -> str:
    java = shutil.which("java") or "java"
    proc = subprocess.run(
        [java, "-Xmx1g", "-cp", kafka_classpath(), TOOLS + main, *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{main} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-2000:]}")  # fmt: skip
    return proc.stdout


_PRODUCE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)
_E2E = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)")


def run_tools(
    bootstrap: str, cpu: Callable[[], float], args: argparse.Namespace, out: ToolFigures
) -> None:
    n = args.records
    create_topic(bootstrap, PERF_TOPIC, 4, {})
    create_topic(bootstrap, E2E_TOPIC, 1, {})
    if args.warmup:  # not measured: a JIT-warm broker JVM, a sparklog broker past start-up
        create_topic(bootstrap, WARM_TOPIC, 4, {})
        tool("ProducerPerformance", "--topic", WARM_TOPIC, "--num-records", str(args.warmup),
             "--record-size", "100", "--throughput", "-1", "--bootstrap-server", bootstrap,
             "--producer-props", "acks=all")  # fmt: skip
        tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", WARM_TOPIC,
             "--num-records", str(args.warmup), "--timeout", "60000", "--hide-header",
             "--group", "warm-up")  # fmt: skip
    c0 = cpu()
    text = tool("ProducerPerformance", "--topic", PERF_TOPIC, "--num-records", str(n),
                "--record-size", "100", "--throughput", "-1", "--bootstrap-server", bootstrap,
                "--producer-props", "acks=all")  # fmt: skip
    out.produce_cpu_us = (cpu() - c0) / n * 1e6
    m = _PRODUCE.findall(text)
    if not m:
        raise RuntimeError(f"ProducerPerformance printed no summary:\n{text[-2000:]}")
    sent, rps, mbps, avg, _mx, p50, _p95, p99 = m[-1]
    if int(sent) != n:
        raise RuntimeError(f"ProducerPerformance sent {sent} of {n}")
    out.produce_rps, out.produce_mbps, out.produce_avg_ms = float(rps), float(mbps), float(avg)
    out.produce_p50_ms, out.produce_p99_ms = float(p50), float(p99)
    out.lines.append(text.strip().splitlines()[-1])

    c0 = cpu()
    text = tool("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", PERF_TOPIC,
                "--num-records", str(n), "--timeout", "60000", "--hide-header",
                "--group", f"perf-{time.monotonic_ns()}")  # fmt: skip
    out.consume_cpu_us = (cpu() - c0) / n * 1e6
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    row = [c.strip() for c in text.strip().splitlines()[-1].split(",")]
    if int(row[4]) < n:
        raise RuntimeError(f"ConsumerPerformance read {row[4]} of {n}: {text[-1000:]}")
    out.consume_mbps, out.consume_rps = float(row[8]), float(row[9])
    out.lines.append(", ".join(row))

    text = tool("EndToEndLatency", bootstrap, E2E_TOPIC, str(args.e2e_records), "all", "100")
    m2 = _E2E.search(text)
    if not m2:
        raise RuntimeError(f"EndToEndLatency printed no percentiles:\n{text[-2000:]}")
    out.e2e_p50_ms, out.e2e_p99_ms, out.e2e_p999_ms = (float(x) for x in m2.groups())
    out.lines.append(m2.group(0))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--e2e-records", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="500k records, 2,000 round trips")
    ap.add_argument("--warmup", type=int, default=1_000_000,
                    help="records produced and consumed on each broker first (0: no)")  # fmt: skip
    ap.add_argument("--tmp-dir", default=None)
    args = ap.parse_args()
    if args.quick:
        args.records, args.e2e_records = 500_000, 2_000
    cleanup_on_signals()
    figures: dict[str, ToolFigures] = {}
    started = time.perf_counter()
    with temp_dir("sparklog-bench-kafka-tools-", args.tmp_dir) as tmp:
        os.sync()
        with BrokerProcess(os.path.join(tmp, "sparklog")) as broker:
            figures["sparklog"] = f = ToolFigures()
            run_tools(broker.bootstrap, broker.cpu_seconds, args, f)
            print("sparklog:\n  " + "\n  ".join(f.lines), flush=True)
        for label, flush in (("kafka", None), ("kafka-flush", 1)):
            os.sync()
            with KafkaServer(os.path.join(tmp, label), flush_messages=flush) as kafka:
                figures[label] = k = ToolFigures()
                run_tools(kafka.bootstrap, kafka.cpu_seconds, args, k)
                print(f"Apache Kafka 4.3.1 ({label}):\n  " + "\n  ".join(k.lines), flush=True)
    f, k, kf = figures["sparklog"], figures["kafka"], figures["kafka-flush"]

    def row(name: str, get: Callable[[ToolFigures], Any], fmt: str, better: str) -> list[str]:
        a, b, c = get(f), get(k), get(kf)
        return [name, format(a, fmt), format(b, fmt), format(c, fmt),
                f"{a / b:.2f}" if b else "", f"{a / c:.2f}" if c else "", better]  # fmt: skip

    rows = [
        row("ProducerPerformance records/s", lambda x: x.produce_rps, ",.0f", "higher"),
        row("ProducerPerformance MB/s", lambda x: x.produce_mbps, ".1f", "higher"),
        row("ProducerPerformance avg latency ms", lambda x: x.produce_avg_ms, ".1f", "lower"),
        row("ProducerPerformance p50 ms", lambda x: x.produce_p50_ms, ".0f", "lower"),
        row("ProducerPerformance p99 ms", lambda x: x.produce_p99_ms, ".0f", "lower"),
        row("broker CPU us/record, producing", lambda x: x.produce_cpu_us, ".2f", "lower"),
        row("ConsumerPerformance records/s", lambda x: x.consume_rps, ",.0f", "higher"),
        row("ConsumerPerformance MB/s", lambda x: x.consume_mbps, ".1f", "higher"),
        row("broker CPU us/record, consuming", lambda x: x.consume_cpu_us, ".2f", "lower"),
        row("EndToEndLatency p50 ms", lambda x: x.e2e_p50_ms, ".2f", "lower"),
        row("EndToEndLatency p99 ms", lambda x: x.e2e_p99_ms, ".2f", "lower"),
        row("EndToEndLatency p99.9 ms", lambda x: x.e2e_p999_ms, ".2f", "lower"),
    ]
    print()
    print(f"Kafka's performance tools, {args.records:,} records of 100 B, acks=all; "
          f"{args.e2e_records:,} end-to-end round trips; {time.strftime('%Y-%m-%d')}")  # fmt: skip
    print(fmt_table(["", "sparklog", "Kafka 4.3.1", "Kafka, flush.messages=1", "/Kafka",
                     "/Kafka flush", "better"], rows))  # fmt: skip
    print(f"\nload average {load_average()}; total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
