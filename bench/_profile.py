"""Where a broker's time goes: ``py-spy`` attached to it (``Profiler``) and its samples
summed by stage and mechanism (``summarize_profile``)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from _tables import fmt_table

from sparklog_testkit.processes import die_with_parent


class Profiler:
    """``py-spy record`` attached to a running process: native frames (C extensions, GC,
    syscalls) and idle threads included, collapsed stacks written to ``out``."""

    def __init__(self, pid: int, out: str, *, rate: int = 100) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @staticmethod
    def executable() -> str:
        found = Path(sys.executable).parent / "py-spy"
        exe = str(found) if found.exists() else shutil.which("py-spy")
        if not exe:
            raise RuntimeError("py-spy not found: .venv/bin/pip install py-spy")
        return exe

    def start(self, timeout: float = 30.0) -> None:
        cmd = [
            self.executable(),
            "record",
            "--pid",
            str(self.pid),
            "--rate",
            str(self.rate),
            "--format",
            "raw",
            "--output",
            self.out,
            "--threads",
            "--idle",
            "--nolineno",
            "--native",
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=die_with_parent,
        )
        ready = threading.Event()
        proc = self.proc

        def drain() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line.rstrip())
                if "Sampling process" in line:
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(timeout):
            self.stop()
            raise RuntimeError("py-spy did not start:\n" + "\n".join(self.output[-20:]))

    def stop(self, timeout: float = 120.0) -> None:
        """Stop sampling (SIGINT) and wait for py-spy to write its output. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# Stages: what the broker was doing, by the deepest Python frame matching one of these.
_STAGES: list[tuple[str, str]] = [
    ("BaseEventLoop._run_once", "asyncio event loop (scheduling, callbacks)"),
    ("EpollSelector.select", "idle: epoll wait"),
    ("_SelectorSocketTransport", "socket I/O (asyncio transports, streams)"),
    ("StreamReader", "socket I/O (asyncio transports, streams)"),
    ("StreamWriter", "socket I/O (asyncio transports, streams)"),
    ("Connection.serve", "server: framing, per-connection loop"),
    ("Broker.dispatch", "server: dispatch"),
    ("parse_request (sparklog/kafka/wire.py)", "kio: parse request"),
    ("encode_response (sparklog/kafka/wire.py)", "kio: build + encode response"),
    ("build (sparklog/kafka/wire.py)", "kio: build + encode response"),
    ("produce (sparklog/broker/handlers/produce.py)", "produce handler (checks, entries)"),
    ("append_records (sparklog/broker/append.py)", "append service (checks, outcomes)"),
    ("_append_one (sparklog/broker/append.py)", "append service (checks, outcomes)"),
    ("decode_batch (sparklog/kafka/records.py)", "decode: Kafka batch -> Arrow (decode_batch)"),
    ("PartitionManager.append", "append: PartitionLog.append (normalize, IPC, CRC, write)"),
    ("PartitionManager.wait_durable", "group commit: futures, executor hand-off"),
    ("GroupCommit.future", "group commit: futures, executor hand-off"),
    ("GroupCommit._release", "group commit: futures, executor hand-off"),
    ("fetch (sparklog/broker/handlers/fetch.py)", "fetch handler"),
    ("_read_partition (sparklog/broker/handlers/fetch.py)", "fetch handler"),
    ("LogView.read", "fetch: read stored Arrow batches"),
    ("encode_batches (sparklog/kafka/records.py)", "fetch: encode Arrow -> Kafka batches"),
    ("PartitionManager.wait_for_data", "fetch: long-poll wait"),
    ("_WorkItem.run", "worker: task completion (future, loop wake-up)"),
    ("GroupCommit._drain", "fsync: group-commit bookkeeping"),
    ("GroupCommit.wait", "fsync: group-commit bookkeeping"),
    ("ActiveSegment.sync", "fsync: fdatasync of the active segment"),
    ("PartitionLog._write_hwm", "fsync: high-watermark checkpoint"),
    ("Sealer.seal_pending", "sealing: Parquet"),
]


# Mechanisms: how, by the deepest frame matching one of these (native frames included).
_MECHANISMS: list[tuple[Callable[[str, str], bool], str]] = [
    (lambda f, m: m.endswith("default_records.c") or "aiokafka" in m, "aiokafka records (C)"),
    (lambda f, m: "arrow" in m or "arrow::" in f, "pyarrow (C++)"),
    (lambda f, m: "crc32c" in f or "crc32c" in m, "CRC-32C"),
    (lambda f, m: m.startswith("kio/"), "kio (Python)"),
    (lambda f, m: m.startswith("asyncio/") or "_asynciomodule" in m, "asyncio (Python)"),
    (lambda f, m: f in ("write", "pwrite64", "writev"), "write()"),
    (lambda f, m: f in ("send", "recv", "sendmsg", "recvmsg", "sendto"), "send()/recv()"),
    (lambda f, m: f in ("open64", "close", "openat", "ftruncate64"), "open()/close()"),
    (lambda f, m: f in ("fdatasync", "fsync"), "fdatasync()"),
    (lambda f, m: f == "epoll_wait", "epoll_wait()"),
    (lambda f, m: f == "sem_post", "waking a thread (sem_post)"),
    (lambda f, m: f.startswith("sem_") or f == "PyThread_acquire_lock_timed", "lock wait"),
    (lambda f, m: f == "gc_collect_main", "cyclic GC"),
    (lambda f, m: f == "pthread_cond_timedwait", "waiting for the GIL"),
]


def _split(frame: str) -> tuple[str, str]:
    name, _, rest = frame.partition(" (")
    return name, rest[:-1] if rest.endswith(")") else rest


def _classify(frames: list[str]) -> tuple[str | None, str]:
    stage: str | None = None
    mech = "Python code"
    for frame in frames:
        for pattern, label in _STAGES:
            if pattern in frame:
                stage, mech = label, "Python code"  # how: only frames below the stage
                break
        name, module = _split(frame)
        for match, label in _MECHANISMS:
            if match(name, module):
                mech = label
                break
    return stage, mech


def summarize_profile(path: str, seconds: float, records: int, top: int = 12) -> str:
    """Where a broker's time went, from ``Profiler`` output (collapsed stacks with thread
    ids). The event-loop thread is broken down by stage and mechanism as a share of its wall
    time; other threads by their busy time."""
    samples: dict[str, Counter[tuple[str | None, str]]] = defaultdict(Counter)
    names: dict[str, str] = {}
    leaves: Counter[str] = Counter()
    loop_tid = None
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            head, *frames = stack.split(";")
            tid, _, tname = head.partition(": ")
            if tname:
                names.setdefault(tid, tname)
            if any("run_forever" in fr for fr in frames):
                loop_tid = tid
            key = _classify(frames)
            samples[tid][key] += int(count)
            if tid == loop_tid and frames:
                leaves[frames[-1]] += int(count)
    if loop_tid is None:
        return "(no event-loop samples in the profile)"
    loop = samples[loop_tid]
    wall = sum(loop.values())
    per_sample = seconds / wall if wall else 0.0
    us_per_record = per_sample * 1e6 / records

    by_stage: dict[str, Counter[str]] = defaultdict(Counter)
    mech_total: Counter[str] = Counter()
    for (stage, mech), n in loop.items():
        by_stage[stage or "other"][mech] += n
        mech_total[mech] += n
    rows = []
    for stage, mechs in sorted(by_stage.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(mechs.values())
        how = ", ".join(f"{m} {c / wall * 100:.1f}" for m, c in mechs.most_common(4))
        rows.append([stage, f"{n / wall * 100:.1f}", f"{n * us_per_record:.3f}", how])
    out = [
        f"Broker event-loop thread ({names.get(loop_tid, loop_tid)}): {wall} samples over "
        f"{seconds:.2f} s; % of its wall time, us per record, and how (% of wall)",
        fmt_table(["stage", "% wall", "us/rec", "mechanisms"], rows, left=(0, 3)),
        "  by mechanism: "
        + ", ".join(f"{m} {c / wall * 100:.1f}%" for m, c in mech_total.most_common()),
    ]
    others: dict[str, Counter[tuple[str | None, str]]] = defaultdict(Counter)
    for tid, counter in samples.items():
        if tid != loop_tid:
            group = re.sub(r"_\d+$", "", names.get(tid, "unnamed"))
            others[group].update(counter)
    for group, counter in sorted(others.items()):
        busy = {k: n for k, n in counter.items() if k[0] is not None}
        total = sum(busy.values())
        if not total:
            continue
        parts = Counter[str]()
        for (stage, mech), n in busy.items():
            parts[f"{stage} / {mech}"] += n
        detail = "; ".join(f"{k} {n * per_sample:.2f} s" for k, n in parts.most_common(5))
        out.append(f"  thread {group}: busy {total * per_sample:.2f} s: {detail}")
    out.append(f"Top {top} leaf frames of the event-loop thread (% of its wall time):")
    for frame, n in leaves.most_common(top):
        out.append(f"  {n / wall * 100:5.1f}  {frame[:110]}")
    return "\n".join(out)
