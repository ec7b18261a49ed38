"""The durability chaos scenario, shared by tests/broker/test_chaos.py and bench/chaos.py.

Several idempotent confluent-kafka producers (acks=all, one thread each) write to a
multi-partition topic while the broker is SIGKILLed and restarted at random moments. Each
producer sends ``"<producer>:<seq>"`` values, ``seq`` counting up, to partition
``seq % partitions``, and records every successful delivery report. At the end the broker is
stopped cleanly and the partitions are read back from storage.

The property (``check``): every acknowledged record is stored exactly once, at its
acknowledged offset; for each producer and partition, acknowledged records sit in send
order; stored offsets are dense from 0 (no compaction or retention runs here, so no gaps and
no reuse); and nothing is stored that was never sent. Records that were sent but never
acknowledged may or may not be stored.

Sizes come from ``ChaosConfig.from_env`` (``SPARKLOG_CHAOS_*``), so bench/chaos.py can run
the same scenario bigger.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerProcess

TOPIC = "chaos"


@dataclass(frozen=True)
class ChaosConfig:
    kills: int = 12  # SIGKILL + restart cycles
    seconds: float = 36.0  # how long the producers run while the broker is being killed
    producers: int = 3
    partitions: int = 4
    rate: float = 250.0  # records per second per producer
    segment_bytes: int = 256 * 1024  # small, so segments roll (and seal) during the run
    seed: int = 0  # 0: pick one (it is printed, so a failing run can be repeated)
    flush_seconds: float = 90.0  # how long producers may take to settle after the run

    @classmethod
    def from_env(cls, **defaults: Any) -> ChaosConfig:
        """Defaults, overridden by ``defaults``, overridden by SPARKLOG_CHAOS_<FIELD>."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = os.environ.get(f"SPARKLOG_CHAOS_{f.name.upper()}")
            if raw is not None:
                values[f.name] = type(getattr(cls(), f.name))(raw)
            elif f.name in defaults:
                values[f.name] = defaults[f.name]
        config = cls(**values)
        if config.seed == 0:
            config = cls(**{**values, "seed": random.SystemRandom().randrange(1, 2**31)})
        return config


@dataclass
class ProducerLog:
    """What one producer sent and what the broker acknowledged."""

    index: int
    sent: int = 0
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)  # partition, offset, value
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error_cb: fatal ones are prefixed
    unflushed: int = 0


@dataclass
class ChaosResult:
    config: ChaosConfig
    kills: int
    seconds: float
    producers: list[ProducerLog]
    stored: dict[int, list[tuple[int, bytes]]]  # partition -> [(offset, value)] in log order
    restart_seconds: list[float] = field(default_factory=list)
    sealed_segments: int = 0  # Parquet segments on disk at the end: rolls did happen

    @property
    def acked(self) -> int:
        return sum(len(p.acked) for p in self.producers)

    @property
    def sent(self) -> int:
        return sum(p.sent for p in self.producers)

    @property
    def failed(self) -> int:
        return sum(len(p.failed) for p in self.producers)

    @property
    def stored_count(self) -> int:
        return sum(len(v) for v in self.stored.values())


def value_of(producer: int, seq: int) -> bytes:
    return f"{producer}:{seq}".encode()


def parse_value(value: bytes) -> tuple[int, int]:
    producer, seq = value.decode().split(":")
    return int(producer), int(seq)


def producer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 120_000,
        "request.timeout.ms": 10_000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 250,
        "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 250,
        "log_level": 0,
    }


def _produce_loop(
    bootstrap: str, log: ProducerLog, config: ChaosConfig, stop: threading.Event
) -> None:
    def on_error(err: KafkaError) -> None:
        log.errors.append(("FATAL " if err.fatal() else "") + str(err))

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            log.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            log.failed.append((msg.value(), str(err)))

    producer = Producer({**producer_config(bootstrap), "error_cb": on_error})
    start = time.monotonic()
    seq = 0
    while not stop.is_set():
        due = start + seq / config.rate
        now = time.monotonic()
        if due > now:
            producer.poll(min(due - now, 0.05))
            continue
        try:
            producer.produce(
                TOPIC,
                value=value_of(log.index, seq),
                partition=seq % config.partitions,
                on_delivery=on_delivery,
            )
        except BufferError:
            producer.poll(0.05)
            continue
        seq += 1
        log.sent = seq
        producer.poll(0)
    log.unflushed = producer.flush(config.flush_seconds)


def create_topic(bootstrap: str, config: ChaosConfig) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    topic = NewTopic(
        TOPIC, config.partitions, 1, config={"segment.bytes": str(config.segment_bytes)}
    )
    admin.create_topics([topic])[TOPIC].result(30)


def read_stored(data_dir: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every stored record of the chaos topic (broker stopped), per partition."""
    storage = Storage(data_dir)
    out: dict[int, list[tuple[int, bytes]]] = {}
    for p in range(partitions):
        view = storage.reader(TOPIC, p).view()
        rows: list[tuple[int, bytes]] = []
        for batch in view.batches(view.log_start_offset):
            offsets = batch.column("offset").to_pylist()
            values = batch.column("value").to_pylist()
            rows += zip(offsets, values, strict=True)
        out[p] = rows
    return out


def run_chaos(
    data_dir: str, config: ChaosConfig, say: Callable[[str], None] = lambda _m: None
) -> ChaosResult:
    """Run the scenario on a fresh broker over ``data_dir``; the broker is stopped after."""
    rng = random.Random(config.seed)
    say(f"chaos: {config}")
    broker = BrokerProcess(data_dir).start()
    logs = [ProducerLog(i) for i in range(config.producers)]
    restarts: list[float] = []
    kills = 0
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        create_topic(broker.bootstrap, config)
        threads = [
            threading.Thread(
                target=_produce_loop,
                args=(broker.bootstrap, log, config, stop),
                name=f"chaos-producer-{log.index}",
                daemon=True,
            )
            for log in logs
        ]
        for t in threads:
            t.start()
        started = time.monotonic()
        # kills at random moments spread over the run, leaving a quiet tail to settle
        window = config.seconds * 0.9
        moments = sorted(rng.uniform(0.05, 1.0) * window for _ in range(config.kills))
        for moment in moments:
            time.sleep(max(0.0, started + moment - time.monotonic()))
            broker.kill()
            kills += 1
            time.sleep(rng.uniform(0.0, 0.3))  # down for a moment: clients see refusals
            t0 = time.monotonic()
            broker.restart()
            restarts.append(time.monotonic() - t0)
            say(f"chaos: kill {kills} at {time.monotonic() - started:.1f} s, back up")
        time.sleep(max(0.0, started + config.seconds - time.monotonic()))
        elapsed = time.monotonic() - started
        stop.set()
        for t in threads:
            t.join(config.flush_seconds + 30)
        assert not any(t.is_alive() for t in threads), "a producer did not finish flushing"
    finally:
        stop.set()
        code = broker.stop()
        broker.kill()
    say(f"chaos: broker stopped (exit {code}); reading storage")
    stored = read_stored(data_dir, config.partitions)
    sealed = len(list(Path(data_dir).glob(f"topics/{TOPIC}/*/*.parquet")))
    return ChaosResult(config, kills, elapsed, logs, stored, restarts, sealed)


# ---------------------------------------------------------------------------- checks


def check_acknowledged_exactly_once(result: ChaosResult) -> list[str]:
    """Every acknowledged value is stored once, at the offset its report gave."""
    at = {(p, off): v for p, rows in result.stored.items() for off, v in rows}
    counts = Counter(v for rows in result.stored.values() for _off, v in rows)
    problems = []
    for log in result.producers:
        for p, off, value in log.acked:
            if at.get((p, off)) != value:
                problems.append(f"{value!r} acked at {p}/{off}, stored there: {at.get((p, off))!r}")
            if counts[value] != 1:
                problems.append(f"{value!r} (acked at {p}/{off}) is stored {counts[value]} times")
    return problems


def check_send_order(result: ChaosResult) -> list[str]:
    """Per producer and partition, acknowledged records are stored in send order."""
    problems = []
    for log in result.producers:
        by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for p, off, value in log.acked:
            by_partition[p].append((off, parse_value(value)[1]))
        for p, pairs in sorted(by_partition.items()):
            seqs = [seq for _off, seq in sorted(pairs)]
            for a, b in itertools.pairwise(seqs):
                if a >= b:
                    problems.append(f"producer {log.index} partition {p}: seq {b} stored after {a}")
    return problems


def check_offsets(result: ChaosResult) -> list[str]:
    """Stored offsets are 0, 1, 2, ... per partition; acknowledged offsets are unique."""
    problems = []
    for p, rows in sorted(result.stored.items()):
        offsets = [off for off, _v in rows]
        if offsets != list(range(len(offsets))):
            bad = next(i for i, off in enumerate(offsets) if off != i)
            problems.append(f"partition {p}: offset {offsets[bad]} at position {bad}")
    acked = Counter((p, off) for log in result.producers for p, off, _v in log.acked)
    problems += [
        f"offset {p}/{off} acknowledged {n} times" for (p, off), n in acked.items() if n > 1
    ]
    return problems


def check_nothing_unsent(result: ChaosResult) -> list[str]:
    """Every stored value is one a producer sent."""
    problems = []
    for p, rows in sorted(result.stored.items()):
        for off, value in rows:
            try:
                producer, seq = parse_value(value)
                ok = 0 <= producer < len(result.producers) and seq < result.producers[producer].sent
            except (ValueError, AttributeError):
                ok = False
            if not ok:
                problems.append(f"{p}/{off}: {value!r} was never sent")
    return problems


def summary(result: ChaosResult) -> str:
    acked_values = {v for log in result.producers for _p, _o, v in log.acked}
    stored_values = [v for rows in result.stored.values() for _o, v in rows]
    unacked_stored = sum(1 for v in stored_values if v not in acked_values)
    dup_unacked = sum(n - 1 for v, n in Counter(stored_values).items() if n > 1)
    errors = Counter(e for log in result.producers for e in log.errors)
    failures = Counter(err for log in result.producers for _v, err in log.failed)
    restart = sorted(result.restart_seconds)
    lines = [
        f"seed {result.config.seed}: {result.kills} kills in {result.seconds:.1f} s, "
        f"{len(result.producers)} producers x {result.config.partitions} partitions",
        f"sent {result.sent}, acknowledged {result.acked}, failed {result.failed}, "
        f"stored {result.stored_count} ({unacked_stored} unacknowledged, "
        f"{dup_unacked} duplicate copies), {result.sealed_segments} sealed segments",
        "restart s: "
        + (f"median {restart[len(restart) // 2]:.2f}, max {restart[-1]:.2f}" if restart else "-"),
    ]
    lines += [f"delivery failure x{n}: {e}" for e, n in failures.most_common(5)]
    lines += [f"client error x{n}: {e}" for e, n in errors.most_common(5)]
    return "\n".join(lines)
