"""Transactions with confluent-kafka (librdkafka) against a broker process: commit and
abort as ``read_committed`` and ``read_uncommitted`` consumers see them, the last stable
offset, offsets sent to a transaction, zombie fencing, expiry, the coordinator's errors,
and everything surviving a SIGKILL of the broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.kafka import admin as kc
from sparklog.kafka import wire
from sparklog.kafka.client import KafkaClient
from sparklog.kafka.records import build_batch
from sparklog_testkit.processes import BrokerProcess

TOPIC = "tx"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker]\ntransaction_max_timeout_ms = 60000\n"
                    "transaction_abort_check_ms = 200\n")  # fmt: skip
    b = BrokerProcess(str(tmp_path / "data"), extra=("--config", str(conf))).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result()
    yield b
    b.stop()


def _producer(b: BrokerProcess, tid: str = "tid-1", **conf: Any) -> Producer:
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, **conf})
    p.init_transactions(15)
    return p


def _consume(
    b: BrokerProcess, isolation: str, topics: list[str] | None = None, quiet_s: float = 1.5
) -> list[tuple[int, int, bytes]]:
    c = Consumer({
        "bootstrap.servers": b.bootstrap, "group.id": f"g-{isolation}-{time.time()}",
        "auto.offset.reset": "earliest", "isolation.level": isolation,
        "enable.auto.commit": False,
    })  # fmt: skip
    c.subscribe(topics or [TOPIC])
    got: list[tuple[int, int, bytes]] = []
    last = time.monotonic()
    deadline = last + 20
    while time.monotonic() < deadline and time.monotonic() - last < quiet_s + (0 if got else 3):
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        got.append((m.partition(), m.offset(), m.value()))
        last = time.monotonic()
    c.close()
    return sorted(got)


def _values(rows: list[tuple[int, int, bytes]]) -> list[bytes]:
    return sorted(v for _, _, v in rows)


def test_committed_records_are_read_and_aborted_ones_are_not(broker: BrokerProcess) -> None:
    p = _producer(broker)
    p.begin_transaction()
    for i in range(6):
        p.produce(TOPIC, key=b"k%d" % i, value=b"commit-%d" % i)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(6):
        p.produce(TOPIC, key=b"k%d" % i, value=b"abort-%d" % i)
    p.flush()
    p.abort_transaction(15)
    committed = _consume(broker, "read_committed")
    assert _values(committed) == sorted(b"commit-%d" % i for i in range(6))
    everything = _consume(broker, "read_uncommitted")
    assert len(everything) == 12  # aborted records are in the log; control records never show


def test_an_open_transaction_holds_read_committed_readers_at_the_lso(
    broker: BrokerProcess,
) -> None:
    p = _producer(broker)
    p.begin_transaction()
    p.produce(TOPIC, value=b"open", partition=0)
    p.flush()
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(TOPIC, value=b"after", partition=0)
    plain.flush()
    with KafkaClient(broker.bootstrap) as c:

        def latest(isolation: int) -> int:
            r = c.request(wire.ApiKey.LIST_OFFSETS, 5, {
                "replica_id": -1, "isolation_level": isolation,
                "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}],
            })  # fmt: skip
            return int(r.topics[0].partitions[0].offset)

        assert (latest(1), latest(0)) == (0, 2)
        assert _consume(broker, "read_committed", quiet_s=1) == []
        p.commit_transaction(15)
        deadline = time.monotonic() + 10  # the commit is durable; the markers follow it
        while latest(1) != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (latest(1), latest(0)) == (3, 3)  # the marker holds offset 2
    assert _values(_consume(broker, "read_committed")) == [b"after", b"open"]


def test_offsets_sent_to_a_transaction_commit_with_it(broker: BrokerProcess) -> None:
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        plain.produce(TOPIC, value=b"in-%d" % i, partition=0)
    plain.flush()
    group = "ctp"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition(TOPIC, 0, 0)])
    msgs = []
    while len(msgs) < 4:
        m = c.poll(1)
        if m is not None and not m.error():
            msgs.append(m)
    peek = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "isolation.level": "read_uncommitted"})  # fmt: skip
    p = _producer(broker, "ctp-tid")
    for outcome in ("abort", "commit"):
        p.begin_transaction()
        for m in msgs:
            p.produce(TOPIC, value=m.value() + b"-out", partition=1)
        p.send_offsets_to_transaction(
            [TopicPartition(TOPIC, 0, 4)], c.consumer_group_metadata(), 15
        )
        # nothing is committed until the transaction commits (a read_committed consumer's
        # OffsetFetch would wait: UNSTABLE_OFFSET_COMMIT while the transaction is open)
        before = peek.committed([TopicPartition(TOPIC, 0)], 10)[0].offset
        assert before < 0
        if outcome == "abort":
            p.abort_transaction(15)
        else:
            p.commit_transaction(15)
    assert c.committed([TopicPartition(TOPIC, 0)], 10)[0].offset == 4
    c.close()
    peek.close()
    out = [v for part, _, v in _consume(broker, "read_committed") if part == 1]
    assert sorted(out) == sorted(b"in-%d-out" % i for i in range(4))


def test_a_second_producer_with_the_same_id_fences_the_first(broker: BrokerProcess) -> None:
    zombie = _producer(broker, "fence-me")
    zombie.begin_transaction()
    zombie.produce(TOPIC, value=b"zombie", partition=0)
    zombie.flush()
    successor = _producer(broker, "fence-me")  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(TOPIC, value=b"successor", partition=0)
    successor.commit_transaction(15)
    with pytest.raises(KafkaException) as e:
        zombie.produce(TOPIC, value=b"zombie-again", partition=0)
        zombie.commit_transaction(15)
    err = e.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)  # fmt: skip
    assert _values(_consume(broker, "read_committed")) == [b"successor"]


def test_a_fenced_producers_next_produce_is_fatal(broker: BrokerProcess) -> None:
    """The zombie's next batch goes to a partition already in its transaction, so it is a
    Produce, not an AddPartitionsToTxn. Kafka 4.3.1 answers it INVALID_PRODUCER_EPOCH,
    which librdkafka treats as fatal (_FENCED); PRODUCER_FENCED there would tell it its
    transaction is merely abortable. Checked against Kafka 4.3.1 with this same client and
    sequence (bench/_kafka.py)."""
    zombie = _producer(broker, "fenced-produce")
    zombie.begin_transaction()
    zombie.produce(TOPIC, value=b"zombie", partition=0)
    zombie.flush(15)
    _producer(broker, "fenced-produce")
    with pytest.raises(KafkaException) as e:
        zombie.produce(TOPIC, value=b"zombie-again", partition=0)
        zombie.flush(15)
        zombie.commit_transaction(15)
    err = e.value.args[0]
    assert err.fatal(), err
    assert err.code() == KafkaError._FENCED, err


def _fenced_epoch(c: KafkaClient, tid: str) -> tuple[int, int]:
    """A producer id that wrote a transactional batch to partition 0 at the epoch returned,
    then was fenced by two more InitProducerIds (one would do since the coordinator keeps
    the previous epoch only for the producer that bumped it, as Kafka does; two keep the
    test independent of that rule)."""
    body = {"transactional_id": tid, "transaction_timeout": 10_000, "producer_id": -1,
            "producer_epoch": -1}  # fmt: skip
    init = c.request(wire.ApiKey.INIT_PRODUCER_ID, 4, body)
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    add = c.request(wire.ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
    })  # fmt: skip
    assert int(add.results_by_topic_v3_and_below[0].results_by_partition[0]
               .partition_error_code) == 0  # fmt: skip
    assert _txn_produce(c, tid, pid, epoch, 0, 9) == 0
    for _ in range(2):
        assert int(c.request(wire.ApiKey.INIT_PRODUCER_ID, 4, body).error_code) == 0
    return pid, epoch


def _txn_produce(c: KafkaClient, tid: str, pid: int, epoch: int, seq: int, version: int) -> int:
    batch = build_batch([(0, int(time.time() * 1000), None, b"x", [])], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, attributes=0x10)  # fmt: skip
    r = c.request(wire.ApiKey.PRODUCE, version, {
        "transactional_id": tid, "acks": -1, "timeout": 10_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    })  # fmt: skip
    return int(r.responses[0].partition_responses[0].error_code)


def test_a_fenced_transactional_produce_is_invalid_producer_epoch_in_every_version(
    broker: BrokerProcess,
) -> None:
    """Kafka 4.3.1 answers 47 (INVALID_PRODUCER_EPOCH) to Produce v3-v9 from a fenced
    epoch; checked with these requests against it (bench/_kafka.py)."""
    with KafkaClient(broker.bootstrap) as c:
        pid, epoch = _fenced_epoch(c, "fenced-raw")
        codes = {v: _txn_produce(c, "fenced-raw", pid, epoch, 1, v) for v in range(3, 10)}
    assert codes == dict.fromkeys(range(3, 10), 47)


def test_a_fenced_txn_offset_commit_is_invalid_producer_epoch(broker: BrokerProcess) -> None:
    """A zombie's TxnOffsetCommit must not join its successor's transaction: Kafka 4.3.1
    answers 47 (INVALID_PRODUCER_EPOCH) in every version (checked with raw requests against
    it, bench/_kafka.py); sparklog answered 0 and staged the zombie's offsets."""
    tid, group = "fenced-offsets", "fenced-offsets-group"
    with KafkaClient(broker.bootstrap) as c:
        pid, epoch = _fenced_epoch(c, tid)
        for version in (0, 3):
            r = c.request(wire.ApiKey.TXN_OFFSET_COMMIT, version, {
                "transactional_id": tid, "group_id": group, "producer_id": pid,
                "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{
                    "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                    "committed_metadata": None}]}],
            })  # fmt: skip
            assert int(r.topics[0].partitions[0].error_code) == 47, version
        assert kc.committed_offsets(c, group) == {}


def test_an_expired_transaction_is_aborted_by_the_broker(broker: BrokerProcess) -> None:
    p = _producer(broker, "slow", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(TOPIC, value=b"too-slow", partition=0)
    p.flush()
    time.sleep(3)
    with pytest.raises(KafkaException):
        p.commit_transaction(15)
    assert _consume(broker, "read_committed", quiet_s=1) == []
    assert any("transaction expired" in line for line in broker.lines)


def test_init_producer_id_refuses_a_timeout_above_the_maximum(broker: BrokerProcess) -> None:
    with KafkaClient(broker.bootstrap) as c:
        r = c.request(wire.ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "too-long", "transaction_timeout": 3_600_000,
            "producer_id": -1, "producer_epoch": -1,
        })  # fmt: skip
    assert int(r.error_code) == 50  # INVALID_TRANSACTION_TIMEOUT


def test_end_txn_without_a_transaction_is_invalid_txn_state(broker: BrokerProcess) -> None:
    with KafkaClient(broker.bootstrap) as c:
        init = c.request(wire.ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "idle", "transaction_timeout": 10_000,
            "producer_id": -1, "producer_epoch": -1,
        })  # fmt: skip
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        end = {"transactional_id": "idle", "producer_id": pid, "committed": True}
        r = c.request(wire.ApiKey.END_TXN, 3, {**end, "producer_epoch": epoch})
        assert int(r.error_code) == 48  # INVALID_TXN_STATE
        r = c.request(wire.ApiKey.END_TXN, 3, {**end, "producer_epoch": epoch - 1})
        assert int(r.error_code) == 90  # PRODUCER_FENCED


def test_add_partitions_of_a_missing_topic_adds_none(broker: BrokerProcess) -> None:
    with KafkaClient(broker.bootstrap) as c:
        init = c.request(wire.ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": "adder", "transaction_timeout": 10_000,
            "producer_id": -1, "producer_epoch": -1,
        })  # fmt: skip
        r = c.request(wire.ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "adder",
            "v3_and_below_producer_id": int(init.producer_id),
            "v3_and_below_producer_epoch": int(init.producer_epoch),
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]},
                                    {"name": "no-such-topic", "partitions": [0]}],
        })  # fmt: skip
        codes = {t.name: int(t.results_by_partition[0].partition_error_code)
                 for t in r.results_by_topic_v3_and_below}  # fmt: skip
        assert codes == {TOPIC: 55, "no-such-topic": 3}  # OPERATION_NOT_ATTEMPTED, UNKNOWN
        ls = c.request(wire.ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": ["Empty"],
                       "producer_id_filters": [], "duration_filter": -1})  # fmt: skip
        assert [t.transactional_id for t in ls.transaction_states] == ["adder"]


def test_describe_and_list_transactions(broker: BrokerProcess) -> None:
    p = _producer(broker, "described")
    p.begin_transaction()
    p.produce(TOPIC, value=b"x", partition=1)
    p.flush()
    with KafkaClient(broker.bootstrap) as c:
        # (kio cannot decode the -1 start time of an id with no open transaction; Kafka's
        # own TransactionsCommand checks those: tests/jvm/test_kafka_tools.py)
        d = c.request(wire.ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["described"]})
        (known,) = d.transaction_states
        assert known.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in known.topics] == [(TOPIC, [1])]
        ls = c.request(wire.ApiKey.LIST_TRANSACTIONS, 1,
                       {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [],
                        "duration_filter": -1})  # fmt: skip
        assert [t.transactional_id for t in ls.transaction_states] == ["described"]
        assert list(ls.unknown_state_filters) == ["Bogus"]
    p.commit_transaction(15)


def test_transactions_survive_a_sigkill_of_the_broker(broker: BrokerProcess) -> None:
    p = _producer(broker, "durable")
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=b"kept-%d" % i, partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=b"dropped-%d" % i, partition=0)
    p.flush()
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(TOPIC, value=b"open-at-kill", partition=0)
    p.flush()
    broker.kill()
    broker.start()
    # the open transaction expires (its timeout: librdkafka's default 60 s is capped by the
    # broker's 60 s maximum) or a new producer with the id aborts it at once
    successor = _producer(broker, "durable")
    successor.begin_transaction()
    successor.produce(TOPIC, value=b"after-restart", partition=0)
    successor.commit_transaction(15)
    assert _values(_consume(broker, "read_committed")) == [
        b"after-restart", b"kept-0", b"kept-1", b"kept-2",
    ]  # fmt: skip


def test_require_stable_offset_fetch_waits_for_the_transaction(broker: BrokerProcess) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stable"})
    p = _producer(broker, "stable-tid")
    p.begin_transaction()
    p.produce(TOPIC, value=b"x", partition=0)
    p.send_offsets_to_transaction([TopicPartition(TOPIC, 1, 7)], c.consumer_group_metadata(), 15)
    fetch = {"group_id": "stable", "topics": [{"name": TOPIC, "partition_indexes": [1]}]}
    with KafkaClient(broker.bootstrap) as k:
        r = k.request(wire.ApiKey.OFFSET_FETCH, 7, {**fetch, "require_stable": True})
        assert int(r.topics[0].partitions[0].error_code) == 88  # UNSTABLE_OFFSET_COMMIT
        r = k.request(wire.ApiKey.OFFSET_FETCH, 7, {**fetch, "require_stable": False})
        assert int(r.topics[0].partitions[0].committed_offset) == -1
        p.commit_transaction(15)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = k.request(wire.ApiKey.OFFSET_FETCH, 7, {**fetch, "require_stable": True})
            if int(r.topics[0].partitions[0].error_code) == 0:
                break
            time.sleep(0.05)
        assert int(r.topics[0].partitions[0].committed_offset) == 7
    c.close()


def test_aiokafkas_transactional_producer_and_read_committed_consumer(
    broker: BrokerProcess,
) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-tid")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(TOPIC, b"aio-commit", partition=0)
            await p.begin_transaction()
            await p.send_and_wait(TOPIC, b"aio-abort", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            TOPIC, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
            isolation_level="read_committed",
        )  # fmt: skip
        await c.start()
        try:
            batches = await c.getmany(timeout_ms=5000)
            return [m.value for msgs in batches.values() for m in msgs]
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"aio-commit"]


def test_kafka_pythons_transactional_producer(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-tid")
    p.init_transactions()
    p.begin_transaction()
    p.send(TOPIC, b"kp-commit", partition=1)
    p.commit_transaction()
    p.begin_transaction()
    p.send(TOPIC, b"kp-abort", partition=1)
    p.flush()
    p.abort_transaction()
    p.close()
    assert _values(_consume(broker, "read_committed")) == [b"kp-commit"]
