"""The append service (``sparklog.broker.append``) driven directly, as the broker builds it:
a real ``PartitionManager`` over a storage root in ``tmp_path``, a real transaction
coordinator and metrics; record batches built by the codec Kafka clients' batches are
checked against (``sparklog.kafka.records.build_batch``). Each scenario runs on its own
event loop (an opened partition wakes waiters on the loop that opened it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from sparklog.broker.append import AppendService
from sparklog.broker.config import BrokerConfig
from sparklog.broker.coordinators.group_offsets import OffsetStore
from sparklog.broker.coordinators.transactions import TransactionCoordinator
from sparklog.broker.errors import error_code
from sparklog.broker.observability.metrics import BrokerMetrics
from sparklog.broker.partitions import PartitionManager
from sparklog.errors import (
    FencedLeaderEpochError,
    InvalidBatchError,
    InvalidRecordsError,
    InvalidRequiredAcksError,
    NotDurableError,
    NotLeaderError,
    RecordsRefusedError,
    RecordTooLargeError,
    UnconfirmedAppendError,
)
from sparklog.kafka.records import TRANSACTIONAL_BIT, build_batch
from sparklog.storage.store import Storage

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60.0))


def batch(
    values: list[bytes], *, key: bytes | None = b"k", producer_id: int = -1, sequence: int = -1
) -> bytes:
    ts = int(time.time() * 1000)
    return build_batch(
        ((i, ts, key, v, []) for i, v in enumerate(values)),
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[PartitionManager]:
    data = str(tmp_path / "data")
    m = PartitionManager(BrokerConfig(data_dir=data), Storage(data))
    yield m
    m.close()


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
def service(manager: PartitionManager, metrics: BrokerMetrics) -> AppendService:
    async def next_producer_id() -> int:
        return manager.producer_ids.next_id()

    transactions = TransactionCoordinator(
        manager,
        OffsetStore(manager),
        next_producer_id=next_producer_id,
        max_timeout_ms=60_000,
        abort_check_ms=60_000,
    )
    return AppendService(manager, transactions, None, metrics)


def log_end(manager: PartitionManager, topic: str, partition: int = 0) -> int:
    return manager.handles[(topic, partition)].log.log_end_offset


def test_appended_batches_get_consecutive_offsets_and_are_durable_on_return(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 1, None)

    async def scenario() -> None:
        first, second = await service.append_records(
            [("t", 0, batch([b"a", b"b"])), ("t", 0, batch([b"c"]))], acks=-1
        )
        assert (first.error, first.base_offset, first.log_start_offset) == (None, 0, 0)
        assert (second.error, second.base_offset) == (None, 2)
        assert first.log_append_time_ms == -1  # CreateTime topic
        assert manager.handles[("t", 0)].log.high_watermark == 3

    run(scenario())


def test_batch_over_max_message_bytes_is_refused_and_nothing_written(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 1, {"max.message.bytes": "100"})

    async def scenario() -> None:
        [outcome] = await service.append_records([("t", 0, batch([b"x" * 200]))], acks=-1)
        assert isinstance(outcome.error, RecordTooLargeError)
        assert "exceeds max.message.bytes 100" in str(outcome.error)
        assert outcome.base_offset == -1
        assert log_end(manager, "t") == 0

    run(scenario())


def test_compacted_topic_refuses_keyless_records_naming_each(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("c", 1, {"cleanup.policy": "compact"})

    async def scenario() -> None:
        [outcome] = await service.append_records([("c", 0, batch([b"a"], key=None))], acks=-1)
        assert isinstance(outcome.error, RecordsRefusedError)
        assert [i for i, _why in outcome.record_errors] == [0]
        assert error_code(outcome.error) == ErrorCode.invalid_record
        assert log_end(manager, "c") == 0

    run(scenario())


def test_two_batches_for_one_partition_are_refused(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 1, None)

    async def scenario() -> None:
        [outcome] = await service.append_records([("t", 0, batch([b"a"]) + batch([b"b"]))], acks=-1)
        assert isinstance(outcome.error, InvalidBatchError)
        assert log_end(manager, "t") == 0

    run(scenario())


def test_a_refused_partition_leaves_the_others_of_the_call_appended(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 2, None)

    async def scenario() -> None:
        bad, good = await service.append_records([("t", 0, None), ("t", 1, batch([b"a"]))], acks=1)
        assert isinstance(bad.error, InvalidBatchError)
        assert (good.error, good.base_offset) == (None, 0)
        assert log_end(manager, "t", 1) == 1

    run(scenario())


def test_acks_other_than_0_1_all_are_refused_before_anything_is_appended(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 1, None)

    async def scenario() -> None:
        with pytest.raises(InvalidRequiredAcksError, match="acks must be 0, 1 or -1"):
            await service.append_records([("t", 0, batch([b"a"]))], acks=2)
        assert ("t", 0) not in manager.handles

    run(scenario())


def test_acks_0_records_become_durable_after_the_call_returns(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 1, None)

    async def scenario() -> None:
        [outcome] = await service.append_records([("t", 0, batch([b"a", b"b"]))], acks=0)
        assert (outcome.error, outcome.base_offset) == (None, 0)
        log = manager.handles[("t", 0)].log
        deadline = time.monotonic() + 30
        while log.high_watermark < 2:
            assert time.monotonic() < deadline, "acks=0 records never became durable"
            await asyncio.sleep(0.01)

    run(scenario())


def test_idempotent_retry_gets_its_original_offsets_and_is_counted_once(
    manager: PartitionManager, service: AppendService, metrics: BrokerMetrics
) -> None:
    manager.create_topic("t", 1, None)
    records = batch([b"a", b"b"], producer_id=7, sequence=0)

    async def scenario() -> None:
        [first] = await service.append_records([("t", 0, records)], acks=-1)
        [retry] = await service.append_records([("t", 0, records)], acks=-1)
        assert first.base_offset == retry.base_offset == 0
        assert retry.error is None
        assert log_end(manager, "t") == 2

    run(scenario())
    counted = metrics.registry.get_sample_value("sparklog_produce_records_total", {"topic": "t"})
    assert counted == 2


def test_transactional_batch_without_a_transactional_id_is_refused(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("t", 1, None)
    ts = int(time.time() * 1000)
    records = build_batch(
        [(0, ts, b"k", b"v", [])],
        producer_id=3,
        producer_epoch=0,
        base_sequence=0,
        attributes=TRANSACTIONAL_BIT,
    )

    async def scenario() -> None:
        [outcome] = await service.append_records([("t", 0, records)], acks=-1)
        assert isinstance(outcome.error, InvalidBatchError)
        assert "transactional id" in str(outcome.error)
        assert log_end(manager, "t") == 0

    run(scenario())


def test_schema_validation_without_a_registry_refuses_the_batch(
    manager: PartitionManager, service: AppendService
) -> None:
    manager.create_topic("s", 1, {"confluent.value.schema.validation": "true"})

    async def scenario() -> None:
        [outcome] = await service.append_records([("s", 0, batch([b"a"]))], acks=-1)
        assert isinstance(outcome.error, InvalidRecordsError)
        assert "no schema registry" in str(outcome.error)
        assert log_end(manager, "s") == 0

    run(scenario())


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NotDurableError(OSError(5, "Input/output error")), ErrorCode.kafka_storage_error),
        (NotDurableError(FencedLeaderEpochError("t-0: epoch 3")), ErrorCode.fenced_leader_epoch),
        (
            UnconfirmedAppendError(NotLeaderError("t-0: broker 1 leads")),
            ErrorCode.request_timed_out,
        ),
    ],
    ids=["failed-fsync", "refused-round", "leadership-lost"],
)
def test_records_not_made_durable_answer_by_their_cause(
    error: NotDurableError, code: ErrorCode
) -> None:
    assert error_code(error) == code
    assert str(error).startswith("not durable: ")


def test_batches_for_a_partition_being_taken_over_wait_for_it_in_order(
    manager: PartitionManager, service: AppendService
) -> None:
    """A new leader's take-over takes a while after Metadata names it (a cache rebuilt
    from object storage); an idempotent producer's pipelined batches answered
    NOT_LEADER_OR_FOLLOWER meanwhile, while a later one succeeds, make librdkafka send the
    earlier records again as new ones (tests/cluster/test_object_storage.py). They wait
    for the take-over instead, and are appended in the order they came."""
    manager.create_topic("t", 1, None)

    async def scenario() -> None:
        manager.taking_over("t", 0)
        first = asyncio.create_task(
            service.append_records([("t", 0, batch([b"a"], producer_id=7, sequence=0))], acks=-1)
        )
        second = asyncio.create_task(
            service.append_records([("t", 0, batch([b"b"], producer_id=7, sequence=1))], acks=-1)
        )
        await asyncio.sleep(0.3)
        assert not first.done() and not second.done()
        manager.taken_over("t", 0)
        [one], [two] = await first, await second
        assert (one.error, one.base_offset, two.error, two.base_offset) == (None, 0, None, 1)

    run(scenario())
