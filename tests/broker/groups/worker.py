"""One consumer-group member in its own process, for tests/broker/groups.

    python -m tests.broker.groups.worker --client confluent|kafka-python --bootstrap HOST:PORT
        --group G --topic T --name N [--strategy S] [--delay SECONDS] [--no-commit]
        [--session-ms MS] [--heartbeat-ms MS] [--max-records N]

It subscribes to one topic and reports what happens as JSON lines on stdout, each flushed
at once and stamped with ``t`` (``time.time()``), so a parent that SIGKILLs it knows
everything it did up to that moment:

    {"ev": "ready"}                                   subscribed, about to poll
    {"ev": "assign", "parts": [..]}                   partitions added (rebalance callback)
    {"ev": "revoke", "parts": [..]}                   partitions taken away (also "lost")
    {"ev": "rec", "p": P, "o": O, "v": VALUE}         a record, processed
    {"ev": "commit", "p": P, "o": O+1, "ok": bool, "err": ..}   its synchronous commit
    {"ev": "closed"}                                  consumer closed (left the group)

A record is reported *before* its commit, and ``--delay`` sleeps between the two, so a kill
is likely to land in the uncommitted window: exactly the window in which the record may be
delivered again. SIGTERM (or ``--max-records`` records) closes the consumer cleanly.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

STOP = False


def emit(**event: Any) -> None:
    event["t"] = time.time()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _on_sigterm(signum: int, frame: object) -> None:
    global STOP
    STOP = True


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": args.heartbeat_ms,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.strategy:
        conf["partition.assignment.strategy"] = args.strategy
    consumer = Consumer(conf)

    def on_assign(c: Any, parts: list[Any]) -> None:
        emit(ev="assign", parts=sorted(tp.partition for tp in parts))

    def on_revoke(c: Any, parts: list[Any]) -> None:
        emit(ev="revoke", parts=sorted(tp.partition for tp in parts))

    def on_lost(c: Any, parts: list[Any]) -> None:
        emit(ev="revoke", parts=sorted(tp.partition for tp in parts), lost=True)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit(ev="ready")
    seen = 0
    while not STOP and (args.max_records is None or seen < args.max_records):
        m = consumer.poll(0.1)
        if m is None:
            continue
        if m.error():
            emit(ev="error", err=str(m.error()))
            continue
        seen += 1
        value = m.value()
        emit(ev="rec", p=m.partition(), o=m.offset(), v=value.decode() if value else None)
        if args.delay:
            time.sleep(args.delay)
        if args.commit:
            tp = TopicPartition(args.topic, m.partition(), m.offset() + 1)
            try:
                (res,) = consumer.commit(offsets=[tp], asynchronous=False)
                ok, err = res.error is None, None if res.error is None else str(res.error)
            except KafkaException as e:
                ok, err = False, str(e)
            emit(ev="commit", p=m.partition(), o=m.offset() + 1, ok=ok, err=err)
    consumer.close()
    emit(ev="closed")


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError

    kwargs: dict[str, Any] = {}
    if args.strategy:
        from kafka.coordinator.assignors.cooperative_sticky import (
            CooperativeStickyPartitionAssignor,
        )
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        known = {
            "range": RangePartitionAssignor,
            "roundrobin": RoundRobinPartitionAssignor,
            "cooperative-sticky": CooperativeStickyPartitionAssignor,
        }
        kwargs["partition_assignment_strategy"] = [known[s] for s in args.strategy.split(",")]
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        fetch_max_wait_ms=100,
        metadata_max_age_ms=2000,
        **kwargs,
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(ev="assign", parts=sorted(tp.partition for tp in assigned))

        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(ev="revoke", parts=sorted(tp.partition for tp in revoked))

        def on_partitions_lost(self, lost: Any) -> None:
            emit(ev="revoke", parts=sorted(tp.partition for tp in lost), lost=True)

    consumer.subscribe([args.topic], listener=Listener())
    emit(ev="ready")
    seen = 0
    while not STOP and (args.max_records is None or seen < args.max_records):
        batch = consumer.poll(timeout_ms=100, max_records=1)
        for tp, msgs in batch.items():
            for m in msgs:
                seen += 1
                value = m.value
                emit(ev="rec", p=tp.partition, o=m.offset, v=value.decode() if value else None)
                if args.delay:
                    time.sleep(args.delay)
                if args.commit:
                    offsets = {TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(
                        m.offset + 1, "", -1)}  # fmt: skip
                    try:
                        consumer.commit(offsets)
                        ok, err = True, None
                    except KafkaError as e:
                        ok, err = False, repr(e)
                    emit(ev="commit", p=tp.partition, o=m.offset + 1, ok=ok, err=err)
    consumer.close(autocommit=False)
    emit(ev="closed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("confluent", "kafka-python"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--strategy")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--no-commit", dest="commit", action="store_false")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--max-records", type=int)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_sigterm)
    if args.client == "confluent":
        run_confluent(args)
    else:
        run_kafka_python(args)


if __name__ == "__main__":
    main()
