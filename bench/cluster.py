"""Cluster mode under faults, and what it costs: ``bench/cluster.py``.

Three parts, each in the same run:

1. **Produce throughput**: one confluent-kafka producer (idempotent, acks=all, 100-byte
   values, linger.ms=5) sends ``--records`` records as fast as it can to a 6-partition
   topic, on: sparklog embedded (one broker, no etcd); sparklog in cluster mode with 1 and
   with 3 brokers (one etcd); the 3 brokers with the ack fence off (started through
   ``bench/_unfenced_broker.py``, which no user setting can do: what the fence costs);
   and Apache Kafka 4.3.1 (single-node KRaft, ``bench/_kafka.py``) as the peer; the
   median of ``--trials`` runs. Then the same producer at a fixed ``--rate`` for
   ``--seconds``, recording each record's ack latency (delivery report time - send time,
   reports polled on their own thread): p50 and p99.
2. **Failover**: 3 brokers, lease TTL ``--ttl-ms``; a workload (``sparklog.demo.workload``)
   writes throughout while ``--faults`` faults happen one after another, cycling through:
   SIGKILL of a partition leader; SIGKILL of the controller; SIGSTOP of a leader past its
   lease, then SIGCONT (the zombie); SIGTERM of a leader (graceful). After each, the
   victim is restarted (or resumed). Unavailability of a fault = the longest gap between
   two consecutive acknowledged writes of a partition the victim led, around the fault
   (``Workload.longest_gap``; at ``--fault-rate`` a partition is acked every few ms).
   ``--storage s3``: the three brokers share nothing but etcd and a bucket (SeaweedFS,
   ``sparklog.demo.seaweed``, started on loopback), each with its own ``--cache-dir``
   and ``--flush-ms``; a SIGKILLed victim (a leader, the controller) also loses its
   cache directory before it is restarted: the machine is gone. The throughput part
   stays on local disks.
3. **The check**: every partition read from start to end, the history checked
   (``sparklog.demo.checker``): operations ok/failed/unknown and every anomaly count
   (all must be 0); the times the fence refused acknowledgements (the brokers' "fence:
   ... acknowledgements refused" lines, one per partition and leader epoch a broker lost
   while it still held records to ack: zombie acks that never happened).

    .venv/bin/python bench/cluster.py --quick            # a few faults, small runs
    .venv/bin/python bench/cluster.py                    # 100 faults
    .venv/bin/python bench/cluster.py --skip-throughput --storage s3   # 100 faults on S3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog_testkit.processes import BrokerCluster, BrokerProcess, EtcdCluster

TOPIC, PARTITIONS = "bench", 6
VALUE = b"x" * 100
#: ``launcher`` of the brokers with the ack fence off (the module docstring)
UNFENCED = (str(Path(__file__).resolve().parent / "_unfenced_broker.py"),)


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(60)


def metadata(bootstrap: str) -> Any:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)


def wait_for_leaders(
    bootstrap: str, avoid: int | None = None, timeout: float = 60
) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = metadata(bootstrap)
            found = {p.id: p.leader for p in md.topics[TOPIC].partitions.values()}
            if len(found) == PARTITIONS and all(n >= 0 and n != avoid for n in found.values()):
                return found
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("partitions without a leader")
        time.sleep(0.1)


# ---------------------------------------------------------------------------- throughput


def max_throughput(bootstrap: str, records: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    for _ in range(1000):  # warm-up: connections, metadata, producer id
        p.produce(TOPIC, VALUE)
    p.flush(60)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, VALUE, b"%d" % i)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    assert left == 0, f"{left} records not delivered"
    return records / (time.perf_counter() - t0)


def ack_latency(bootstrap: str, rate: int, seconds: float) -> tuple[float, float]:
    """p50 and p99 ack latency (ms) at ``rate`` records/s."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5})  # fmt: skip
    for _ in range(100):  # warm-up: connections, metadata, producer id
        p.produce(TOPIC, VALUE)
    p.flush(60)
    lat: list[float] = []
    # delivery reports run in whichever thread polls: poll continuously on another thread,
    # so that a report's time is its ack's (within a millisecond), not the send loop's tick
    sending = threading.Event()
    sending.set()

    def poll() -> None:
        while sending.is_set():
            p.poll(0.001)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()

    def make_cb(sent: float) -> Any:
        def cb(err: Any, _msg: Any) -> None:
            if err is None:
                lat.append((time.perf_counter() - sent) * 1000)

        return cb

    step = max(rate // 100, 1)
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(step):
            p.produce(TOPIC, VALUE, on_delivery=make_cb(time.perf_counter()))
            n += 1
        ahead = n / rate - (time.perf_counter() - t0)
        if ahead > 0:
            time.sleep(ahead)
    sending.clear()
    poller.join()
    p.flush(60)
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


def run_throughput(work: str, args: argparse.Namespace) -> list[tuple[str, float, float, float]]:
    rows: list[tuple[str, float, float, float]] = []

    def measure(name: str, bootstrap: str) -> None:
        create_topic(bootstrap)
        wait_for_leaders(bootstrap)
        tput = statistics.median(
            max_throughput(bootstrap, args.records) for _ in range(args.trials)
        )
        p50, p99 = ack_latency(bootstrap, args.rate, args.seconds)
        rows.append((name, tput, p50, p99))
        print(f"  {name:<34} {tput:>10,.0f} rec/s   ack p50 {p50:6.1f} ms  p99 {p99:6.1f} ms",
              flush=True)  # fmt: skip

    with BrokerProcess(f"{work}/embedded") as b:
        measure("sparklog embedded (1 broker)", b.bootstrap)
    for n, fence in ((1, True), (3, True), (3, False)):
        launcher = ("-m", "sparklog.cli") if fence else UNFENCED
        with (
            EtcdCluster(f"{work}/etcd-{n}-{fence}", members=1) as etcd,
            BrokerCluster(
                f"{work}/shared-{n}-{fence}", etcd.endpoints, n, launcher=launcher
            ) as cluster,  # fmt: skip
        ):
            name = f"sparklog cluster, {n} broker{'s' if n > 1 else ''}" + (
                "" if fence else ", fence off"
            )
            measure(name, cluster.bootstrap)
    if not args.no_kafka:
        from bench._kafka import KafkaServer

        with KafkaServer(f"{work}/kafka") as kafka:
            measure("Apache Kafka 4.3.1 (1 node)", kafka.bootstrap)
    return rows


# ---------------------------------------------------------------------------- failover

KINDS = ("kill leader", "kill controller", "pause leader past its lease", "stop leader")


def fault_cluster(
    work: str, args: argparse.Namespace, endpoints: str, stack: contextlib.ExitStack
) -> tuple[BrokerCluster, dict[int, str]]:
    """The fault run's three brokers (not started) and each one's cache directory (none
    on a shared local directory): on ``--storage s3``, a SeaweedFS started on loopback
    (stopped with ``stack``), its ``AWS_*`` variables put in this process's environment
    for the brokers to inherit, the root a prefix of its bucket."""
    if args.storage == "local":
        return BrokerCluster(
            f"{work}/shared-faults", endpoints, 3, lease_ttl_ms=args.ttl_ms
        ), {}  # fmt: skip
    from sparklog.demo.seaweed import SeaweedS3

    os.makedirs(f"{work}/seaweed")
    s3 = stack.enter_context(SeaweedS3(f"{work}/seaweed", bucket="bench"))
    os.environ.update(s3.env())
    cluster = BrokerCluster("s3://bench/faults", endpoints, 3, lease_ttl_ms=args.ttl_ms)
    caches = {}
    for i, b in cluster.brokers.items():
        caches[i] = f"{work}/cache-{i}"
        b.extra = (*b.extra, "--cache-dir", caches[i], "--flush-ms", str(args.flush_ms))
    return cluster, caches


def run_faults(work: str, args: argparse.Namespace) -> dict[str, Any]:
    ttl_s = args.ttl_ms / 1000
    out: dict[str, Any] = {"unavailable": {k: [] for k in KINDS}}
    with contextlib.ExitStack() as stack:
        etcd = stack.enter_context(EtcdCluster(f"{work}/etcd-faults", members=args.etcd_members))
        cluster, caches = fault_cluster(work, args, etcd.endpoints, stack)
        stack.enter_context(cluster)
        create_topic(cluster.bootstrap)
        wait_for_leaders(cluster.bootstrap)
        bootstrap = cluster.bootstrap
        work_load = Workload(bootstrap, TOPIC, rate=args.fault_rate).start()
        began = time.monotonic()
        marks: dict[str, float] = {}
        try:
            time.sleep(2)
            for i in range(args.faults):
                kind = KINDS[i % len(KINDS)]
                md = metadata(bootstrap)
                leaders = {p.id: p.leader for p in md.topics[TOPIC].partitions.values()}
                victim = md.controller_id if kind == "kill controller" else leaders[i % PARTITIONS]
                led = [p for p, n in leaders.items() if n == victim]
                t0 = time.monotonic()
                if i < CHARTED_FAULTS:
                    marks[f"{i + 1}: {kind}"] = t0 - began
                proc = cluster.brokers[victim]
                if kind == "pause leader past its lease":
                    cluster.pause(victim)
                    time.sleep(ttl_s + 2)
                    cluster.resume(victim)
                elif kind == "stop leader":
                    proc.stop(30)
                else:
                    proc.kill()
                    if victim in caches:  # the machine is gone, its disk with it
                        shutil.rmtree(caches[victim], ignore_errors=True)
                t_done = time.monotonic()  # after a pause: when the victim was resumed
                for p in led:
                    while work_load.acked_since(t_done, p) is None:
                        if time.monotonic() - t0 > 90:
                            raise TimeoutError(f"fault {i} ({kind}): partition {p} never recovered")
                        time.sleep(0.02)
                time.sleep(0.5)
                worst = max(
                    (work_load.longest_gap(p, t0, time.monotonic()) for p in led), default=0.0
                )
                if led:
                    out["unavailable"][kind].append(worst)
                print(f"  fault {i + 1:>3} {kind:<30} broker {victim} (led {led}): writes "
                      f"again after {worst:.2f} s", flush=True)  # fmt: skip
                if not proc.alive:
                    proc.start()
                wait_for_leaders(bootstrap)
                time.sleep(1)
        finally:
            history = work_load.stop(flush_s=20)
            if args.logs:
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                for n, b in cluster.brokers.items():
                    Path(args.logs, f"broker-{n}.log").write_text("\n".join(b.lines))
        work_load.read_all(timeout_s=300)
        report = check(history)
        if args.logs:
            Path(args.logs, "anomalies.txt").write_text(repr(report.examples))
        refused = sum("acknowledgements refused" in ln for b in cluster.brokers.values()
                      for ln in b.lines)  # fmt: skip
        out.update(report=report, refused=refused, errors=work_load.errors[:5])
        out["chart"] = _failover_chart(work_load, began, marks, args)
    return out


CHARTED_FAULTS = 8  # the timeline shows the first faults: more would be unreadable


def _failover_chart(work_load: Workload, began: float, marks: dict[str, float],
                    args: argparse.Namespace) -> str:  # fmt: skip
    """docs/img/failover-timeline.png (``-s3.png`` on ``--storage s3``): acknowledged
    writes per 0.25 s across the first faults, a line per fault."""
    import _charts

    end = (max(marks.values()) + 15) if marks else 30
    step = 0.25
    bins = [0] * int(end / step + 1)
    for times in work_load.ack_times.values():
        for t in times:
            k = int((t - began) / step)
            if 0 <= k < len(bins):
                bins[k] += 1
    xs = [i * step for i in range(len(bins))]
    ys = [n / step for n in bins]
    note = (f"3 brokers ({args.storage}), lease TTL {args.ttl_ms} ms, workload "
            f"{args.fault_rate} writes/s over {PARTITIONS} partitions")  # fmt: skip
    name = "failover-timeline.png" if args.storage == "local" else "failover-timeline-s3.png"
    return _charts.timeline(name, "Acknowledged writes through faults",
                            {"acks/s (all partitions)": (xs, ys)}, "seconds", "acks/s",
                            marks=marks, note=note)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 faults, small runs")
    ap.add_argument("--faults", type=int, default=100)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rate", type=int, default=5000, help="records/s of the ack latency run")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--ttl-ms", type=int, default=3000)
    ap.add_argument("--fault-rate", type=int, default=500)
    ap.add_argument("--etcd-members", type=int, default=1)
    ap.add_argument(
        "--storage",
        choices=("local", "s3"),
        default="local",
        help="the fault run's storage: a shared directory, or a bucket (SeaweedFS)",
    )
    ap.add_argument(
        "--flush-ms",
        type=int,
        default=25,
        help="--storage s3: the brokers' flush interval (one round object each)",
    )
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-faults", action="store_true")
    ap.add_argument("--logs", help="a directory to keep the brokers' logs of the fault run in")
    ap.add_argument("--trials", type=int, default=3, help="throughput runs per setup (median)")
    args = ap.parse_args()
    if args.quick:
        args.faults, args.records, args.seconds, args.trials = 8, 100_000, 8, 1
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-cluster-") as work:
        print(f"sparklog bench/cluster.py on {os.cpu_count()} cores", flush=True)
        if not args.skip_throughput:
            print("produce throughput and ack latency:", flush=True)
            rows = run_throughput(work, args)
            by = {r[0]: r for r in rows}
            three, one = by["sparklog cluster, 3 brokers"], by["sparklog cluster, 1 broker"]
            off = by["sparklog cluster, 3 brokers, fence off"]
            print(f"  3 vs 1 broker throughput: {three[1] / one[1]:.2f}x; the fence costs "
                  f"{(1 - three[1] / off[1]) * 100:.0f} % of throughput, ack p99 "
                  f"{three[3]:.1f} vs {off[3]:.1f} ms", flush=True)  # fmt: skip
            kafka = by.get("Apache Kafka 4.3.1 (1 node)")
            if kafka is not None:
                embedded = by["sparklog embedded (1 broker)"][1]
                print(f"  sparklog cluster (1 broker) / Kafka throughput: "
                      f"{one[1] / kafka[1]:.2f}x; embedded / Kafka: {embedded / kafka[1]:.2f}x",
                      flush=True)  # fmt: skip
        if args.skip_faults:
            return 0
        where = (
            "a shared directory"
            if args.storage == "local"
            else (
                f"S3 (SeaweedFS on loopback, flush {args.flush_ms} ms, a SIGKILLed broker's cache "
                "directory deleted)"
            )
        )
        print(f"failover on {where}: {args.faults} faults, lease TTL {args.ttl_ms} ms:",
              flush=True)  # fmt: skip
        res = run_faults(work, args)
        for kind, xs in res["unavailable"].items():
            if xs:
                p50 = statistics.median(xs)
                print(f"  {kind:<30} n={len(xs):>3}  unavailable p50 {p50:5.2f} s  "
                      f"max {max(xs):5.2f} s", flush=True)  # fmt: skip
        r = res["report"]
        print(f"  history: {r.summary()}", flush=True)
        print(f"  chart: {res['chart']}", flush=True)
        print(f"  partitions (and epochs) whose acks the fence refused: {res['refused']}",
              flush=True)  # fmt: skip
        if res["errors"]:
            print(f"  producer errors (first): {res['errors']}", flush=True)
        return 0 if r.valid else 1


if __name__ == "__main__":
    sys.exit(main())
