"""Transactional produce throughput against plain (idempotent) produce, on sparklog and on
Apache Kafka 4.3.1, in one run.

Workload: one confluent-kafka producer (acks=all, idempotent, linger.ms=5, batch.size 1
MiB) sends ``--records`` records (16-byte keys, 100-byte values) to a 4-partition topic.
*plain*: as fast as ``produce()`` accepts them, timed to the end of ``flush()``.
*transactional*: the same records in transactions of ``--txn-size`` records
(``begin_transaction``, the records, ``commit_transaction``), timed to the last commit.
Afterwards a ``read_committed`` count of the topic's records must equal ``--records``.

Brokers, each fresh per repeat: a sparklog broker (embedded; an ack is an fsync) and
Kafka, with its default flush policy (acked from the page cache) and with
``flush.messages=1`` (an fsync before each ack, as sparklog acks). ``--no-kafka`` skips
Kafka. Printed: records/s of each (broker, mode), the transactional / plain ratio per
broker, and sparklog / Kafka per mode.

    .venv/bin/python bench/transactions.py --quick     # 100k records, 1 repeat
    .venv/bin/python bench/transactions.py             # 400k records, median of 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _broker import BrokerProcess

TOPIC = "txbench"
PARTITIONS = 4


def _create(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(60)


def _config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 200_000,
        **extra,
    }  # fmt: skip


def _records(n: int) -> list[tuple[bytes, bytes]]:
    rnd = os.urandom(100)
    return [(b"%016d" % (i % 4096), rnd) for i in range(n)]


def produce_plain(bootstrap: str, records: list[tuple[bytes, bytes]]) -> float:
    p = Producer(_config(bootstrap))
    t0 = time.perf_counter()
    for k, v in records:
        while True:
            try:
                p.produce(TOPIC, key=k, value=v)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def produce_transactional(bootstrap: str, records: list[tuple[bytes, bytes]], size: int) -> float:
    p = Producer(_config(bootstrap, **{"transactional.id": f"bench-{time.time()}"}))
    p.init_transactions(60)
    t0 = time.perf_counter()
    for start in range(0, len(records), size):
        p.begin_transaction()
        for k, v in records[start : start + size]:
            while True:
                try:
                    p.produce(TOPIC, key=k, value=v)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
    return time.perf_counter() - t0


def committed_count(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count",
                  "isolation.level": "read_committed"})  # fmt: skip
    total = 0
    for p in range(PARTITIONS):
        lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
        total += hi - lo
    c.close()
    return total


def consumed(bootstrap: str, expected: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "fetch.max.bytes": 50 << 20})  # fmt: skip
    c.subscribe([TOPIC])
    n, last = 0, time.monotonic()
    while n < expected and time.monotonic() - last < 10:
        msgs = c.consume(10_000, 0.5)
        good = sum(1 for m in msgs if not m.error())
        if good:
            n += good
            last = time.monotonic()
    c.close()
    return n


def one_run(start_broker: Callable[[str], Any], mode: str, records: list[tuple[bytes, bytes]],
            txn_size: int) -> float:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="txbench-") as tmp, start_broker(tmp) as bootstrap:
        _create(bootstrap)
        if mode == "plain":
            seconds = produce_plain(bootstrap, records)
        else:
            seconds = produce_transactional(bootstrap, records, txn_size)
        got = consumed(bootstrap, len(records))
        if got != len(records):
            raise SystemExit(f"{mode}: read_committed read {got} records, {len(records)} sent")
        return len(records) / seconds


class _Sparklog:
    def __init__(self, tmp: str) -> None:
        self.broker = BrokerProcess(os.path.join(tmp, "data"))

    def __enter__(self) -> str:
        self.broker.start()
        return self.broker.bootstrap

    def __exit__(self, *exc: object) -> None:
        self.broker.stop()


class _Kafka:
    def __init__(self, tmp: str, flush: int | None) -> None:
        from _kafka import KafkaServer

        self.server = KafkaServer(tmp, flush_messages=flush)

    def __enter__(self) -> str:
        self.server.start()
        return self.server.bootstrap

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--txn-size", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="100k records, 1 repeat")
    ap.add_argument("--no-kafka", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.repeats = 100_000, 1
    records = _records(args.records)
    brokers: dict[str, Callable[[str], Any]] = {"sparklog": _Sparklog}
    if not args.no_kafka:
        brokers["kafka"] = lambda tmp: _Kafka(tmp, None)
        brokers["kafka fsync"] = lambda tmp: _Kafka(tmp, 1)
    rates: dict[tuple[str, str], float] = {}
    for name, start in brokers.items():
        for mode in ("plain", "transactional"):
            runs = [one_run(start, mode, records, args.txn_size) for _ in range(args.repeats)]
            rates[(name, mode)] = statistics.median(runs)
            print(f"{name:12s} {mode:14s} {rates[(name, mode)]:>12,.0f} records/s  "
                  f"(runs: {', '.join(f'{r:,.0f}' for r in runs)})", flush=True)  # fmt: skip
    print(f"\n{args.records:,} records of 116 bytes, transactions of {args.txn_size:,} records")
    for name in brokers:
        ratio = rates[(name, "transactional")] / rates[(name, "plain")]
        print(f"{name:12s} transactional / plain = {ratio:.2f}")
    for peer in [n for n in brokers if n != "sparklog"]:
        for mode in ("plain", "transactional"):
            ratio = rates[("sparklog", mode)] / rates[(peer, mode)]
            print(f"sparklog / {peer:12s} {mode:14s} = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
