"""The transaction coordinator's state machine, driven directly (``TransactionCoordinator``
over a real ``PartitionManager`` and ``OffsetStore`` in ``tmp_path``, as
``sparklog.broker.server.Broker.start`` builds them): Empty -> Ongoing ->
PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort, epochs and fencing, expiry,
replay of ``__transaction_state``, and the refusals of each.

The spec is Apache Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``
(``transaction-coordinator`` / ``core``); a test's docstring says what Kafka answers where it
pins that down, read from that source, and where sparklog answers differently on purpose
(docs/transactions.md: requests of one id wait for each other instead of getting
CONCURRENT_TRANSACTIONS)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
import pytest

from sparklog.broker.coordinators.group_offsets import (
    OFFSETS_TOPIC,
    CommitEntry,
    OffsetStore,
    offsets_partition,
)
from sparklog.broker.coordinators.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    MAX_EPOCH,
    ONGOING,
    PREPARE_COMMIT,
    TXN_TOPIC,
    TransactionCoordinator,
    TxnMeta,
    txn_partition,
)
from sparklog.broker.partitions import PartitionManager
from sparklog.errors import (
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from sparklog.storage.producers import ProducerBatch

from .conftest import eventually, open_offsets, run

TID = "txn-1"
TOPIC = "t"
T0 = (TOPIC, 0)
T1 = (TOPIC, 1)


@pytest.fixture
def topic(manager: PartitionManager) -> Iterator[str]:
    manager.create_topic(TOPIC, 2, None)
    yield TOPIC


def coordinator(
    manager: PartitionManager, *, abort_check_ms: int = 60_000
) -> TransactionCoordinator:
    """An embedded broker's coordinator and its offsets, replayed; the expiry loop is not
    started (tests of expiry start it with a short ``abort_check_ms``)."""

    async def next_producer_id() -> int:
        return manager.producer_ids.next_id()

    c = TransactionCoordinator(
        manager,
        open_offsets(manager),
        next_producer_id=next_producer_id,
        max_timeout_ms=900_000,
        abort_check_ms=abort_check_ms,
    )
    c.load()
    return c


def produce(manager: PartitionManager, partition: tuple[str, int], pid: int, epoch: int) -> None:
    """One transactional record from producer ``pid`` (opens its transaction there)."""
    handle = manager.partition(*partition)
    seq = sum(1 for p in handle.log.producers() if p[0] == pid)
    records = pa.RecordBatch.from_arrays(
        [pa.array([b"k"], pa.binary()), pa.array([b"v"], pa.binary())], names=["key", "value"]
    )
    handle.log.append(records, producer=ProducerBatch(pid, epoch, seq, 1, transactional=True))


def decided(manager: PartitionManager, partition: tuple[str, int]) -> bool:
    """No transaction is open in ``partition`` (its last stable offset caught up)."""
    view = manager.partition(*partition).log.view()
    return view.last_stable_offset == view.hwm.offset


def aborted_by(manager: PartitionManager, partition: tuple[str, int]) -> set[int]:
    return {a.producer_id for a in manager.partition(*partition).log.view().txn.aborted}


async def begin(c: TransactionCoordinator, manager: PartitionManager) -> tuple[int, int]:
    """A new id with an open transaction over T0 holding one record: (pid, epoch)."""
    pid, epoch = await c.init_producer_id(TID, 60_000)
    await c.add_partitions(TID, pid, epoch, [T0])
    produce(manager, T0, pid, epoch)
    return pid, epoch


# ---------------------------------------------------------------------- InitProducerId


def test_new_id_gets_a_new_producer_id_at_epoch_0(manager: PartitionManager) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert pid >= 0 and epoch == 0
        meta = c.describe(TID)
        assert (meta.producer_id, meta.state, meta.timeout_ms) == (pid, EMPTY, 60_000)
        other, _ = await c.init_producer_id("txn-2", 60_000)
        assert other != pid

    run(scenario())


def test_known_id_keeps_its_producer_id_at_the_next_epoch(manager) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 30_000) == (pid, epoch + 1)
        assert c.describe(TID).timeout_ms == 30_000

    run(scenario())


def test_empty_transactional_id_is_refused(manager) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError):
            await coordinator(manager).init_producer_id("", 60_000)

    run(scenario())


@pytest.mark.parametrize("timeout_ms", [0, 900_001])
def test_timeout_outside_bounds_is_invalid(manager, timeout_ms: int) -> None:
    """Kafka: INVALID_TRANSACTION_TIMEOUT above ``transaction.max.timeout.ms`` (and for a
    timeout that is not positive)."""

    async def scenario() -> None:
        c = coordinator(manager)
        with pytest.raises(InvalidTransactionTimeoutError):
            await c.init_producer_id(TID, timeout_ms)
        assert TID not in c.txns

    run(scenario())


def test_init_aborts_the_open_transaction_at_a_bumped_epoch(manager, topic) -> None:
    """Fencing: InitProducerId for an id with an open transaction aborts it at the bumped
    epoch (Kafka's ``PrepareEpochFence``), then bumps again for the new producer, so the
    new producer holds epoch + 2; the aborted records are listed as aborted."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        assert not decided(manager, T0)
        assert await c.init_producer_id(TID, 60_000) == (pid, epoch + 2)
        meta = c.describe(TID)
        assert meta.state == EMPTY and not meta.partitions
        assert decided(manager, T0) and pid in aborted_by(manager, T0)

    run(scenario())


def test_zombie_is_fenced_after_init(manager, topic) -> None:
    """Kafka: a request with an older epoch than the id's is PRODUCER_FENCED."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.init_producer_id(TID, 60_000)
        with pytest.raises(ProducerFencedError):
            await c.add_partitions(TID, pid, epoch, [T1])
        with pytest.raises(ProducerFencedError):
            await c.end_txn(TID, pid, epoch, commit=True)

    run(scenario())


def test_current_producer_may_bump_its_own_epoch(manager) -> None:
    """KIP-360: InitProducerId with the id's current producer id and epoch bumps it."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)

    run(scenario())


def test_other_producer_asking_for_a_bump_is_fenced(manager) -> None:
    """KIP-360: a producer id that is not the id's (nor its previous one) is
    PRODUCER_FENCED."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        with pytest.raises(ProducerFencedError):
            await c.init_producer_id(TID, 60_000, pid + 1000, epoch)
        assert c.describe(TID).producer_epoch == epoch

    run(scenario())


def test_retried_bump_returns_the_same_epoch(manager) -> None:
    """Kafka's ``prepareIncrementProducerEpoch``: InitProducerId with the epoch just before
    the current one, after that producer's own bump, is a retry whose answer was lost: it
    gets the current epoch back, not another bump."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)
        assert await c.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)

    run(scenario())


def test_fenced_producer_cannot_bump_its_way_back(manager) -> None:
    """Kafka: a new producer's InitProducerId clears the previous epoch, so the producer it
    fenced asking for a bump with its old epoch (KIP-360) is PRODUCER_FENCED, and the new
    producer keeps the id."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 60_000) == (pid, epoch + 1)
        with pytest.raises(ProducerFencedError):
            await c.init_producer_id(TID, 60_000, pid, epoch)
        assert c.describe(TID).producer_epoch == epoch + 1

    run(scenario())


def test_retry_is_recognised_after_a_restart(manager) -> None:
    """The previous epoch is part of the id's record, so a retry is still one after the
    coordinator replays ``__transaction_state``."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        await c.init_producer_id(TID, 60_000, pid, epoch)
        again = coordinator(manager)
        assert await again.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)

    run(scenario())


def test_exhausted_epoch_gets_a_new_producer_id(manager) -> None:
    """Kafka's ``isEpochExhausted``: at epoch 32766 the id moves to a new producer id at
    epoch 0 (the state is written to ``__transaction_state`` as a record and replayed)."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, _ = await c.init_producer_id(TID, 60_000)
        write_state(manager, replace(c.describe(TID), producer_epoch=MAX_EPOCH))
        c = coordinator(manager)
        new_pid, epoch = await c.init_producer_id(TID, 60_000)
        assert new_pid != pid and epoch == 0

    run(scenario())


# ---------------------------------------------------------------------- AddPartitionsToTxn


def test_add_partitions_begins_a_transaction(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        await c.add_partitions(TID, pid, epoch, [T0])
        await c.add_partitions(TID, pid, epoch, [T1, T0])
        meta = c.describe(TID)
        assert meta.state == ONGOING and meta.partitions == {T0, T1}
        assert meta.start_ms > 0

    run(scenario())


def test_add_partitions_for_unknown_id_is_invalid_mapping(manager, topic) -> None:
    """Kafka: AddPartitionsToTxn for a transactional id it has no state for is
    INVALID_PRODUCER_ID_MAPPING."""

    async def scenario() -> None:
        with pytest.raises(InvalidProducerIdMappingError):
            await coordinator(manager).add_partitions("nobody", 1, 0, [T0])

    run(scenario())


def test_add_partitions_with_other_producer_id_is_invalid_mapping(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        with pytest.raises(InvalidProducerIdMappingError):
            await c.add_partitions(TID, pid + 1, epoch, [T0])

    run(scenario())


def test_partitions_that_do_not_exist_are_named(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        missing = c.check_partitions([T0, (TOPIC, 2), ("nosuch", 0)])
        assert set(missing) == {(TOPIC, 2), ("nosuch", 0)}

    run(scenario())


# ---------------------------------------------------------------------- EndTxn


def test_commit_writes_commit_markers_and_completes(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        await eventually(lambda: c.describe(TID).state == COMPLETE_COMMIT, "CompleteCommit")
        assert decided(manager, T0) and not aborted_by(manager, T0)

    run(scenario())


def test_abort_writes_abort_markers_and_completes(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=False)
        await eventually(lambda: c.describe(TID).state == COMPLETE_ABORT, "CompleteAbort")
        assert decided(manager, T0) and pid in aborted_by(manager, T0)

    run(scenario())


def test_end_is_answered_once_prepare_is_durable(manager, topic) -> None:
    """EndTxn is answered after step 1 (``Prepare*`` fsynced), as Kafka's is: the record is
    in ``__transaction_state`` when the call returns."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        assert PREPARE_COMMIT in stored_states(manager)

    run(scenario())


def test_end_without_open_transaction_is_invalid_txn_state(manager) -> None:
    """Kafka: EndTxn in state Empty is INVALID_TXN_STATE."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        with pytest.raises(InvalidTxnStateError):
            await c.end_txn(TID, pid, epoch, commit=True)

    run(scenario())


def test_retried_commit_is_answered_again(manager, topic) -> None:
    """Kafka: EndTxn(commit) in CompleteCommit is a retry and answered NONE."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        await eventually(lambda: c.describe(TID).state == COMPLETE_COMMIT, "CompleteCommit")
        await c.end_txn(TID, pid, epoch, commit=True)
        assert c.describe(TID).state == COMPLETE_COMMIT

    run(scenario())


def test_abort_after_commit_is_invalid_txn_state(manager, topic) -> None:
    """Kafka: EndTxn(abort) in CompleteCommit (or PrepareCommit) is INVALID_TXN_STATE."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        with pytest.raises(InvalidTxnStateError):
            await c.end_txn(TID, pid, epoch, commit=False)

    run(scenario())


def test_commit_after_abort_is_invalid_txn_state(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=False)
        with pytest.raises(InvalidTxnStateError):
            await c.end_txn(TID, pid, epoch, commit=True)

    run(scenario())


def test_end_with_other_producer_id_is_invalid_mapping(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        with pytest.raises(InvalidProducerIdMappingError):
            await c.end_txn(TID, pid + 1, epoch, commit=True)
        assert c.describe(TID).state == ONGOING

    run(scenario())


def test_concurrent_requests_of_one_id_wait_for_each_other(manager, topic) -> None:
    """Kafka answers a request that arrives while the id is in ``Prepare*``
    CONCURRENT_TRANSACTIONS (the client retries); sparklog serialises the id's requests,
    so AddPartitionsToTxn sent with EndTxn waits for the markers and begins the next
    transaction."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await asyncio.gather(
            c.end_txn(TID, pid, epoch, commit=True), c.add_partitions(TID, pid, epoch, [T1])
        )
        meta = c.describe(TID)
        assert meta.state == ONGOING and meta.partitions == {T1}
        assert decided(manager, T0)

    run(scenario())


def test_next_transaction_starts_with_no_partitions(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=False)
        await c.add_partitions(TID, pid, epoch, [T1])
        assert c.describe(TID).partitions == {T1}
        assert decided(manager, T0)

    run(scenario())


# ---------------------------------------------------------------------- expiry


def test_expired_transaction_is_aborted_at_a_bumped_epoch(manager, topic) -> None:
    """Kafka's ``transaction.timeout.ms``: an Ongoing transaction older than its timeout
    is aborted with an epoch bump, which fences the producer that let it expire."""

    async def scenario() -> None:
        c = coordinator(manager, abort_check_ms=50)
        c.start()
        try:
            pid, epoch = await c.init_producer_id(TID, 1000)
            await c.add_partitions(TID, pid, epoch, [T0])
            produce(manager, T0, pid, epoch)
            await eventually(lambda: c.describe(TID).state == COMPLETE_ABORT, "the expiry")
            assert c.describe(TID).producer_epoch == epoch + 1
            assert decided(manager, T0) and pid in aborted_by(manager, T0)
            with pytest.raises(ProducerFencedError):
                await c.end_txn(TID, pid, epoch, commit=True)
        finally:
            await c.stop()

    run(scenario())


def test_producer_whose_transaction_expired_cannot_bump_its_way_back(manager, topic) -> None:
    """Kafka's ``prepareFenceProducerEpoch`` clears the previous epoch: after an expiry,
    InitProducerId with the expired producer's epoch (KIP-360) is PRODUCER_FENCED."""

    async def scenario() -> None:
        c = coordinator(manager, abort_check_ms=50)
        c.start()
        try:
            pid, epoch = await c.init_producer_id(TID, 200)
            await c.init_producer_id(TID, 200, pid, epoch)  # its own bump: epoch + 1
            await c.add_partitions(TID, pid, epoch + 1, [T0])
            await eventually(lambda: c.describe(TID).state == COMPLETE_ABORT, "the expiry")
            with pytest.raises(ProducerFencedError):
                await c.init_producer_id(TID, 60_000, pid, epoch + 1)
            with pytest.raises(ProducerFencedError):
                await c.init_producer_id(TID, 60_000, pid, epoch)
        finally:
            await c.stop()

    run(scenario())


def test_transaction_within_its_timeout_is_kept(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager, abort_check_ms=50)
        c.start()
        try:
            pid, epoch = await begin(c, manager)  # 60 s timeout
            other, other_epoch = await c.init_producer_id("short", 100)
            await c.add_partitions("short", other, other_epoch, [T1])
            # the short one expiring shows the loop ran over both
            await eventually(lambda: c.describe("short").state == COMPLETE_ABORT, "the expiry")
            assert c.describe(TID).state == ONGOING
            await c.end_txn(TID, pid, epoch, commit=True)
        finally:
            await c.stop()

    run(scenario())


# ---------------------------------------------------------------------- durable state


def stored_states(manager: PartitionManager) -> list[str]:
    """The states of ``TID`` in ``__transaction_state``, in log order."""
    plog = manager.partition(TXN_TOPIC, txn_partition(TID)).log
    out = []
    for batch in plog.batches(plog.log_start_offset, columns=["offset", "key", "value"]):
        for key, value in zip(
            batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True
        ):
            if json.loads(key) == ["txn", TID]:
                out.append(json.loads(value)["state"])
    return out


def write_state(manager: PartitionManager, meta: TxnMeta) -> None:
    """Append ``meta`` to ``__transaction_state`` in its documented record format (what a
    coordinator that crashed after writing it left behind)."""
    key = json.dumps(["txn", meta.transactional_id]).encode()
    records = pa.RecordBatch.from_arrays(
        [pa.array([key], pa.binary()), pa.array([meta.to_json()], pa.binary())],
        names=["key", "value"],
    )
    manager.partition(TXN_TOPIC, txn_partition(meta.transactional_id)).log.append(records)


def test_every_state_change_is_one_record(manager, topic) -> None:
    """Each state change is one record of the id in ``__transaction_state``; the last one
    wins on replay."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        await eventually(lambda: c.describe(TID).state == COMPLETE_COMMIT, "CompleteCommit")
        # Complete* is not awaited (step 3): the id's next durable record makes it durable
        await c.init_producer_id(TID, 60_000)
        assert stored_states(manager) == [EMPTY, ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT, EMPTY]

    run(scenario())


def test_replay_restores_the_state(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        await begin(c, manager)
        before = c.describe(TID)
        after = coordinator(manager).describe(TID)
        assert replace(after, update_ms=0) == replace(before, update_ms=0)

    run(scenario())


def test_replay_finishes_a_prepared_transaction(manager, topic) -> None:
    """Crash point after step 1: ``PrepareCommit`` is in the log but no marker is. Loading
    the partition writes the markers and ``CompleteCommit``."""

    async def scenario() -> None:
        c = coordinator(manager)
        await begin(c, manager)
        write_state(manager, replace(c.describe(TID), state=PREPARE_COMMIT))
        assert not decided(manager, T0)
        after = coordinator(manager)
        await eventually(lambda: after.describe(TID).state == COMPLETE_COMMIT, "the finish")
        assert decided(manager, T0) and not aborted_by(manager, T0)

    run(scenario())


def test_a_dropped_partition_forgets_its_ids_until_loaded_again(manager, topic) -> None:
    """Cluster mode hands ``__transaction_state`` partitions between brokers: dropping one
    forgets its ids (another coordinator owns them), loading it replays them."""

    async def scenario() -> None:
        c = coordinator(manager)
        await begin(c, manager)
        before = c.describe(TID)
        c.drop_partition(txn_partition(TID))
        with pytest.raises(TransactionalIdNotFoundError):
            c.describe(TID)
        c.load_partition(txn_partition(TID))
        assert replace(c.describe(TID), update_ms=0) == replace(before, update_ms=0)

    run(scenario())


def test_unknown_id_is_not_found(manager) -> None:
    async def scenario() -> None:
        with pytest.raises(TransactionalIdNotFoundError):
            coordinator(manager).describe("nobody")

    run(scenario())


# ---------------------------------------------------------------------- produce checks


def test_produce_to_an_added_partition_is_verified(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        c.verify(TID, pid, epoch, T0)

    run(scenario())


def test_produce_to_a_partition_not_added_is_invalid_txn_state(manager, topic) -> None:
    """KIP-890: a transactional batch to a partition the transaction did not add is
    refused (INVALID_TXN_STATE)."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        with pytest.raises(InvalidTxnStateError):
            c.verify(TID, pid, epoch, T1)

    run(scenario())


def test_produce_after_the_transaction_ended_is_invalid_txn_state(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        with pytest.raises(InvalidTxnStateError):
            c.verify(TID, pid, epoch, T0)

    run(scenario())


def test_produce_from_a_fenced_epoch_is_fenced(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.init_producer_id(TID, 60_000)
        with pytest.raises(ProducerFencedError):
            c.verify(TID, pid, epoch, T0)
        with pytest.raises(ProducerFencedError):
            c.check_epoch(TID, pid, epoch)

    run(scenario())


def test_ids_this_coordinator_does_not_know_are_not_checked(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        c.verify("elsewhere", 5, 0, T0)
        c.check_epoch("elsewhere", 5, 0)

    run(scenario())


# ---------------------------------------------------------------------- offsets in a txn


async def commit_offsets_in_txn(c: TransactionCoordinator, *, commit: bool) -> OffsetStore:
    """AddOffsetsToTxn for group ``g``, TxnOffsetCommit of t-0 at 7, then EndTxn."""
    offsets = c.offsets
    pid, epoch = await c.init_producer_id(TID, 60_000)
    await c.add_partitions(TID, pid, epoch, [(OFFSETS_TOPIC, offsets_partition("g"))])
    await offsets.txn_commit("g", pid, epoch, [CommitEntry(TOPIC, 0, 7)])
    assert offsets.unstable("g") == {T0} and offsets.committed("g") == {}
    await c.end_txn(TID, pid, epoch, commit=commit)
    await eventually(lambda: not offsets.unstable("g"), "the offsets' marker")
    return offsets


def test_offsets_committed_in_a_transaction_apply_on_commit(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        offsets = await commit_offsets_in_txn(c, commit=True)
        assert offsets.committed("g")[T0].offset == 7

    run(scenario())


def test_offsets_committed_in_a_transaction_vanish_on_abort(manager, topic) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        offsets = await commit_offsets_in_txn(c, commit=False)
        assert offsets.committed("g") == {}

    run(scenario())


# ---------------------------------------------------------------------- deleted topics


def test_transaction_over_a_deleted_topic_completes(manager, topic) -> None:
    """Kafka's ``TransactionMarkerChannelManager``: a partition whose topic was deleted
    gets no marker ("likely deleted already and hence can be skipped") and the
    transaction completes. Without that, the id would stay in ``PrepareCommit`` and every
    later InitProducerId of it would fail on the missing partition."""

    async def scenario() -> None:
        c = coordinator(manager)
        manager.create_topic("gone", 1, None)
        pid, epoch = await begin(c, manager)
        await c.add_partitions(TID, pid, epoch, [("gone", 0)])
        produce(manager, ("gone", 0), pid, epoch)
        manager.delete_topic("gone")
        await c.end_txn(TID, pid, epoch, commit=True)
        await eventually(lambda: c.describe(TID).state == COMPLETE_COMMIT, "CompleteCommit")
        assert decided(manager, T0)
        assert await c.init_producer_id(TID, 60_000) == (pid, epoch + 1)

    run(scenario())
