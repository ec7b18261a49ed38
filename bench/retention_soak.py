"""Retention soak: a producer faster than the sealer for minutes, ``retention.bytes`` set,
``sparklog scheduler`` running; how much disk the topic takes, at its peak.

Per code tree (``--tree``, default this checkout; give a second one, e.g. a worktree of an
older commit, to compare side by side), on a fresh data dir:

- a broker process (``manifest_refresh_ms`` 200, ``gc_interval_ms`` 1000) and ``sparklog
  scheduler --min-interval 1 --max-jobs 1`` from that tree;
- a topic of ``--partitions`` partitions with ``segment.bytes`` = ``--segment-bytes``,
  ``retention.bytes`` = ``--retention-bytes`` (per partition, as in Kafka) and
  ``file.delete.delay.ms`` 2000;
- one confluent-kafka producer (acks=all, linger 5 ms, no compression) sending random,
  incompressible values of ``--value-bytes`` as fast as the broker takes them, for
  ``--seconds``: the background sealer (one thread, zstd Parquet) falls behind;
- a sampler, every 0.2 s: the bytes of every file in the topic's partition directories
  (*disk*), the bytes the latest manifests name (*live*: rolled segments plus the active
  segment's high-watermark position) and the rolled segments still awaiting their seal
  (*backlog*).

The bounds printed are what the design promises (docs/compaction.md), for what the broker
took in its busiest stretches (high watermarks sampled every 0.2 s, times the Arrow bytes
per record) and the longest measured gap between two retention runs (which sets how far a
partition can grow past its limit: ``--min-interval 1`` plus the scheduler's half-second
tick, when the scheduler keeps up):

- *live* <= partitions x (``retention.bytes`` + two segments: what the bytes rule keeps
  beyond the limit, up to one segment, and the active segment) + the most written in any
  stretch as long as that gap. Rolled segments still awaiting their seal count in it: the
  sealer's backlog is bounded by retention itself;
- *disk* <= live bound + one segment per partition (the Parquet file being written next
  to its ``.arrow``) + the most written in any stretch of ``file.delete.delay.ms`` + the
  broker's gc period + its manifest refresh: dropped files wait that long for readers, as
  in Kafka.

Kafka's own peer figure (its retention checker, ``log.retention.check.interval.ms``) joins
when the Kafka jars do (issue 14). ``--seal-pause-ms`` makes each seal of the broker wait
first (``SPARKLOG_PAUSE_AT``, a test hook), so the sealer falls behind on any machine.

    .venv/bin/python bench/retention_soak.py --quick         # 40 s
    .venv/bin/python bench/retention_soak.py                 # 3 minutes
    .venv/bin/python bench/retention_soak.py --tree /work/old --tree .   # before and after
    .venv/bin/python bench/retention_soak.py --seal-pause-ms 2000       # a sealer behind
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from _broker import cleanup_on_signals, temp_dir
from _tables import fmt_table

from sparklog.storage import Storage, checkpoints, names
from sparklog.storage.manifest import ManifestStore
from sparklog_testkit.processes import die_with_parent

HERE = Path(__file__).resolve().parents[1]
TOPIC = "soak"
LISTENING = re.compile(r"listening on (?:[A-Z_]+://)?([\d.]+):(\d+)")
CHECK_INTERVAL_S = 1.0
DELETE_DELAY_MS = 2000
GC_INTERVAL_MS = 1000
REFRESH_MS = 200
TICK_S = 0.5
SAMPLE_S = 0.2
#: a scheduler log line saying retention ran (this tree's in-process runs that deleted
#: something in a partition, or an older tree's retention job of a topic finishing)
RETENTION_RAN = re.compile(
    r"\[retention \S+\] retention (\S+): deleted|retention of topic (\S+) done"
)


@dataclass
class Sample:
    t: float
    disk: int
    live: int
    backlog_segments: int
    backlog_bytes: int
    written: int  # records written so far: the partitions' high watermarks summed
    arrow_bytes_per_record: float  # of the rolled .arrow segments in the manifests, or 0


@dataclass
class Run:
    tree: str
    produced_bytes: int = 0
    records: int = 0
    seconds: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    retention_runs: int = 0
    retention_gap_s: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def peak(self, attr: str) -> int:
        return max((getattr(s, attr) for s in self.samples), default=0)


def _spawn(tree: str, args: list[str], env_extra: dict[str, str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": tree, **env_extra}
    return subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", *args], cwd=tree, env=env, text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,
    )  # fmt: skip


def _drain(proc: subprocess.Popen[str], lines: list[str], port: list[int]) -> threading.Thread:
    def run() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip())
            m = LISTENING.search(line)
            if m and not port:
                port.append(int(m.group(2)))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _sample(storage: Storage, partitions: int) -> Sample:
    disk = live = backlog_n = backlog_b = written = 0
    arrow_bytes = arrow_records = 0
    for p in range(partitions):
        path = names.partition_dir(storage.root, TOPIC, p)
        for dirpath, _dirs, files in os.walk(path):
            for f in files:
                with contextlib.suppress(FileNotFoundError):
                    disk += os.path.getsize(os.path.join(dirpath, f))
        try:
            m = ManifestStore(storage.fs, path).latest()
            if m is None:
                continue
            active = checkpoints.active_segment_bytes(storage.fs, path, m.active.name)
            hw = checkpoints.read_high_watermark(storage.fs, path, m.active.name)
        except Exception:
            continue  # a version being written or collected under the sampler: next sample
        live += sum(s.size_bytes for s in m.segments[:-1]) + active
        backlog = m.unsealed_rolled
        backlog_n += len(backlog)
        backlog_b += sum(s.size_bytes for s in backlog)
        written += hw.offset if hw is not None else 0
        arrow_bytes += sum(s.size_bytes for s in backlog)
        arrow_records += sum(s.records for s in backlog)
    per_record = arrow_bytes / arrow_records if arrow_records else 0.0
    return Sample(time.monotonic(), disk, live, backlog_n, backlog_b, written, per_record)


def most_written(samples: list[Sample], seconds: float) -> int:
    """The most records written in any ``seconds``-long stretch (sample to sample)."""
    best, i = 0, 0
    for s in samples:
        while s.t - samples[i].t > seconds:
            i += 1
        best = max(best, s.written - samples[i].written)
    return best


def soak(tree: str, args: argparse.Namespace) -> Run:
    run = Run(tree)
    with temp_dir("sparklog-soak-") as tmp:
        data = os.path.join(tmp, "data")
        storage = Storage(data)
        storage.topics.create(
            TOPIC, args.partitions,
            {"segment.bytes": str(args.segment_bytes),
             "retention.bytes": str(args.retention_bytes),
             "file.delete.delay.ms": str(DELETE_DELAY_MS)},
        )  # fmt: skip
        conf = os.path.join(tmp, "broker.toml")
        with open(conf, "w") as f:
            f.write(
                f"[broker]\nmanifest_refresh_ms = {REFRESH_MS}\ngc_interval_ms = {GC_INTERVAL_MS}\n"
            )
        venv = {"VENV": str(HERE / ".venv")}
        if args.seal_pause_ms:
            venv["SPARKLOG_PAUSE_AT"] = f"seal.before_write={args.seal_pause_ms}"
        broker_lines: list[str] = []
        port: list[int] = []
        broker = _spawn(tree, ["broker", "start", "--data-dir", data, "--listen",
                               "127.0.0.1:0", "--config", conf], venv)  # fmt: skip
        _drain(broker, broker_lines, port)
        sched_lines: list[str] = []
        scheduler = None
        try:
            deadline = time.monotonic() + 60
            while not port:
                if broker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("broker did not start:\n" + "\n".join(broker_lines))
                time.sleep(0.05)
            scheduler = _spawn(tree, ["scheduler", "--data-dir", data, "--min-interval",
                                      str(CHECK_INTERVAL_S), "--max-interval", "10",
                                      "--max-jobs", "1"], venv)  # fmt: skip
            _drain(scheduler, sched_lines, [])
            stop = threading.Event()

            def sampler() -> None:
                while not stop.is_set():
                    run.samples.append(_sample(storage, args.partitions))
                    stop.wait(SAMPLE_S)

            sampling = threading.Thread(target=sampler, daemon=True)
            sampling.start()
            run.records, run.produced_bytes, run.seconds = _produce(f"127.0.0.1:{port[0]}", args)
            time.sleep(CHECK_INTERVAL_S + 2 * TICK_S)  # the last check after the last write
            stop.set()
            sampling.join(5)
        finally:
            for proc in (scheduler, broker):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        runs: dict[str, list[float]] = {}
        for ln in sched_lines:
            m = RETENTION_RAN.search(ln)
            if m:
                runs.setdefault(m.group(1) or m.group(2), []).append(_at(ln))
        run.retention_runs = max((len(v) for v in runs.values()), default=0)
        run.retention_gap_s = max(
            (b - a for v in runs.values() for a, b in itertools.pairwise(v)), default=0.0
        )
        run.warnings = [ln for ln in sched_lines + broker_lines if " ERROR " in ln][:5]
    return run


def _produce(bootstrap: str, args: argparse.Namespace) -> tuple[int, int, float]:
    values = [os.urandom(args.value_bytes) for _ in range(64)]
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
         "queue.buffering.max.kbytes": 262144, "acks": "all"}
    )  # fmt: skip
    errors: list[str] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    n = 0
    t0 = time.monotonic()
    end = t0 + args.seconds
    while time.monotonic() < end:
        for _ in range(1000):
            try:
                producer.produce(TOPIC, values[n % 64], partition=n % args.partitions,
                                 on_delivery=done)  # fmt: skip
            except BufferError:
                producer.poll(0.05)
                continue
            n += 1
        producer.poll(0)
    producer.flush(120)
    took = time.monotonic() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} produce errors, first: {errors[0]}")
    return n, n * args.value_bytes, took


def _at(line: str) -> float:
    stamp = line[:23]  # logging's asctime: 2026-11-24 10:00:00,123
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def bounds(args: argparse.Namespace, run: Run, gap_s: float) -> tuple[int, int]:
    """(live, disk): what the design promises (module docstring), for the bytes the broker
    took in its busiest stretches (the high watermarks sampled every 0.2 s, times the
    Arrow bytes per record) and the longest measured gap between two retention runs."""
    per_record = max((s.arrow_bytes_per_record for s in run.samples), default=0.0)
    per_record = per_record or args.value_bytes
    grown = most_written(run.samples, gap_s + SAMPLE_S) * per_record
    live = args.partitions * (args.retention_bytes + 2 * args.segment_bytes) + grown
    garbage_s = (DELETE_DELAY_MS + GC_INTERVAL_MS + REFRESH_MS) / 1000 + SAMPLE_S
    disk = (
        live
        + args.partitions * args.segment_bytes
        + most_written(run.samples, garbage_s) * per_record
    )
    return int(live), int(disk)


def main() -> int:
    cleanup_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", help="a code tree to run (repeatable)")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--quick", action="store_true", help="40 s")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--segment-bytes", type=int, default=4 << 20)
    ap.add_argument("--retention-bytes", type=int, default=32 << 20)
    ap.add_argument("--value-bytes", type=int, default=4000)
    ap.add_argument(
        "--seal-pause-ms", type=int, default=0,
        help="each seal waits this long first (SPARKLOG_PAUSE_AT): a sealer that falls behind",
    )  # fmt: skip
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.seconds = 40.0
    trees = [str(Path(t).resolve()) for t in (args.tree or [str(HERE)])]
    runs = []
    for tree in trees:
        print(f"soaking {tree} for {args.seconds:.0f} s ...", flush=True)
        runs.append(soak(tree, args))
    rows = []
    out = []
    for r in runs:
        rate = r.produced_bytes / r.seconds
        gap = r.retention_gap_s or r.seconds  # no second run: the whole soak
        live_bound, disk_bound = bounds(args, r, gap)
        figures = {
            "tree": r.tree,
            "produced_MB": r.produced_bytes / 1e6,
            "rate_MB_s": rate / 1e6,
            "peak_disk_MB": r.peak("disk") / 1e6,
            "peak_live_MB": r.peak("live") / 1e6,
            "final_disk_MB": (r.samples[-1].disk if r.samples else 0) / 1e6,
            "peak_backlog_segments": r.peak("backlog_segments"),
            "peak_backlog_MB": r.peak("backlog_bytes") / 1e6,
            "retention_runs": r.retention_runs,
            "max_retention_gap_s": gap,
            "live_bound_MB": live_bound / 1e6,
            "disk_bound_MB": disk_bound / 1e6,
            "peak_live_over_bound": r.peak("live") / live_bound,
            "peak_disk_over_bound": r.peak("disk") / disk_bound,
            "errors": r.warnings,
        }
        out.append(figures)
        rows.append([
            os.path.basename(r.tree) or r.tree,
            f"{figures['produced_MB']:,.0f}",
            f"{figures['rate_MB_s']:,.1f}",
            f"{figures['peak_backlog_segments']} ({figures['peak_backlog_MB']:,.0f} MB)",
            f"{r.retention_runs}, {gap:.1f} s",
            f"{figures['peak_live_MB']:,.1f} / {figures['live_bound_MB']:,.1f} = "
            f"{figures['peak_live_over_bound']:.2f}",
            f"{figures['peak_disk_MB']:,.1f} / {figures['disk_bound_MB']:,.1f} = "
            f"{figures['peak_disk_over_bound']:.2f}",
            f"{figures['final_disk_MB']:,.1f}",
        ])  # fmt: skip
    print()
    print(
        f"{args.partitions} partitions, segment.bytes {args.segment_bytes:,}, retention.bytes "
        f"{args.retention_bytes:,} per partition, {args.value_bytes}-byte random values, "
        f"{args.seconds:.0f} s"
        + (f", each seal paused {args.seal_pause_ms} ms first" if args.seal_pause_ms else "")
    )
    print(fmt_table(
        ["tree", "produced MB", "MB/s", "peak seal backlog", "retention runs, max gap",
         "peak live / bound MB", "peak disk / bound MB", "final disk MB"], rows,
    ))  # fmt: skip
    for f in out:
        if f["errors"]:
            print(f"{f['tree']}: errors: {f['errors']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "runs": out}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
