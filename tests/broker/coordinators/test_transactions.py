"""The transaction coordinator's state machine, driven directly (``TransactionCoordinator``
over a real ``PartitionManager`` and ``OffsetStore`` in ``tmp_path``, as
``sparklog.broker.server.Broker.start`` builds them): Empty -> Ongoing ->
PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort, epochs and fencing, expiry,
offsets in a transaction, and the refusals of each. Its log and its produce checks have
their own modules.

The spec is Apache Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``
(``transaction-coordinator`` / ``core``); a test's docstring says what Kafka answers where it
pins that down, read from that source, and where sparklog answers differently on purpose
(docs/transactions.md: requests of one id wait for each other instead of getting
CONCURRENT_TRANSACTIONS)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

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
    TransactionCoordinator,
)
from sparklog.broker.partitions import PartitionManager
from sparklog.errors import (
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)

from .helpers import eventually, run
from .txn_helpers import (
    T0,
    T1,
    TID,
    TOPIC,
    aborted_by,
    begin,
    coordinator,
    decided,
    produce,
    stored_states,
    write_state,
)

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


def test_known_id_keeps_its_producer_id_at_the_next_epoch(manager: PartitionManager) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 30_000) == (pid, epoch + 1)
        assert c.describe(TID).timeout_ms == 30_000

    run(scenario())


def test_empty_transactional_id_is_refused(manager: PartitionManager) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError):
            await coordinator(manager).init_producer_id("", 60_000)

    run(scenario())


@pytest.mark.parametrize("timeout_ms", [0, 900_001])
def test_timeout_outside_bounds_is_invalid(manager: PartitionManager, timeout_ms: int) -> None:
    """Kafka: INVALID_TRANSACTION_TIMEOUT above ``transaction.max.timeout.ms`` (and for a
    timeout that is not positive)."""

    async def scenario() -> None:
        c = coordinator(manager)
        with pytest.raises(InvalidTransactionTimeoutError):
            await c.init_producer_id(TID, timeout_ms)
        assert TID not in c.txns

    run(scenario())


def test_init_aborts_the_open_transaction_at_a_bumped_epoch(
    manager: PartitionManager, topic: str
) -> None:
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


def test_zombie_is_fenced_after_init(manager: PartitionManager, topic: str) -> None:
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


def test_current_producer_may_bump_its_own_epoch(manager: PartitionManager) -> None:
    """KIP-360: InitProducerId with the id's current producer id and epoch bumps it."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)

    run(scenario())


def test_other_producer_asking_for_a_bump_is_fenced(manager: PartitionManager) -> None:
    """KIP-360: a producer id that is not the id's (nor its previous one) is
    PRODUCER_FENCED."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        with pytest.raises(ProducerFencedError):
            await c.init_producer_id(TID, 60_000, pid + 1000, epoch)
        assert c.describe(TID).producer_epoch == epoch

    run(scenario())


def test_retried_bump_returns_the_same_epoch(manager: PartitionManager) -> None:
    """Kafka's ``prepareIncrementProducerEpoch``: InitProducerId with the epoch just before
    the current one, after that producer's own bump, is a retry whose answer was lost: it
    gets the current epoch back, not another bump."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        assert await c.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)
        assert await c.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)

    run(scenario())


def test_fenced_producer_cannot_bump_its_way_back(manager: PartitionManager) -> None:
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


def test_retry_is_recognised_after_a_restart(manager: PartitionManager) -> None:
    """The previous epoch is part of the id's record, so a retry is still one after the
    coordinator replays ``__transaction_state``."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        await c.init_producer_id(TID, 60_000, pid, epoch)
        again = coordinator(manager)
        assert await again.init_producer_id(TID, 60_000, pid, epoch) == (pid, epoch + 1)

    run(scenario())


def test_exhausted_epoch_gets_a_new_producer_id(manager: PartitionManager) -> None:
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


def test_add_partitions_begins_a_transaction(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        await c.add_partitions(TID, pid, epoch, [T0])
        await c.add_partitions(TID, pid, epoch, [T1, T0])
        meta = c.describe(TID)
        assert meta.state == ONGOING and meta.partitions == {T0, T1}
        assert meta.start_ms > 0

    run(scenario())


def test_add_partitions_for_unknown_id_is_invalid_mapping(
    manager: PartitionManager, topic: str
) -> None:
    """Kafka: AddPartitionsToTxn for a transactional id it has no state for is
    INVALID_PRODUCER_ID_MAPPING."""

    async def scenario() -> None:
        with pytest.raises(InvalidProducerIdMappingError):
            await coordinator(manager).add_partitions("nobody", 1, 0, [T0])

    run(scenario())


def test_add_partitions_with_other_producer_id_is_invalid_mapping(
    manager: PartitionManager, topic: str
) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        with pytest.raises(InvalidProducerIdMappingError):
            await c.add_partitions(TID, pid + 1, epoch, [T0])

    run(scenario())


def test_partitions_that_do_not_exist_are_named(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        missing = c.check_partitions([T0, (TOPIC, 2), ("nosuch", 0)])
        assert set(missing) == {(TOPIC, 2), ("nosuch", 0)}

    run(scenario())


# ---------------------------------------------------------------------- EndTxn


def test_commit_writes_commit_markers_and_completes(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        await eventually(lambda: c.describe(TID).state == COMPLETE_COMMIT, "CompleteCommit")
        assert decided(manager, T0) and not aborted_by(manager, T0)

    run(scenario())


def test_abort_writes_abort_markers_and_completes(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=False)
        await eventually(lambda: c.describe(TID).state == COMPLETE_ABORT, "CompleteAbort")
        assert decided(manager, T0) and pid in aborted_by(manager, T0)

    run(scenario())


def test_end_is_answered_once_prepare_is_durable(manager: PartitionManager, topic: str) -> None:
    """EndTxn is answered after step 1 (``Prepare*`` fsynced), as Kafka's is: the record is
    in ``__transaction_state`` when the call returns."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        assert PREPARE_COMMIT in stored_states(manager)

    run(scenario())


def test_end_without_open_transaction_is_invalid_txn_state(manager: PartitionManager) -> None:
    """Kafka: EndTxn in state Empty is INVALID_TXN_STATE."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await c.init_producer_id(TID, 60_000)
        with pytest.raises(InvalidTxnStateError):
            await c.end_txn(TID, pid, epoch, commit=True)

    run(scenario())


def test_retried_commit_is_answered_again(manager: PartitionManager, topic: str) -> None:
    """Kafka: EndTxn(commit) in CompleteCommit is a retry and answered NONE."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        await eventually(lambda: c.describe(TID).state == COMPLETE_COMMIT, "CompleteCommit")
        await c.end_txn(TID, pid, epoch, commit=True)
        assert c.describe(TID).state == COMPLETE_COMMIT

    run(scenario())


def test_abort_after_commit_is_invalid_txn_state(manager: PartitionManager, topic: str) -> None:
    """Kafka: EndTxn(abort) in CompleteCommit (or PrepareCommit) is INVALID_TXN_STATE."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        with pytest.raises(InvalidTxnStateError):
            await c.end_txn(TID, pid, epoch, commit=False)

    run(scenario())


def test_commit_after_abort_is_invalid_txn_state(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=False)
        with pytest.raises(InvalidTxnStateError):
            await c.end_txn(TID, pid, epoch, commit=True)

    run(scenario())


def test_end_with_other_producer_id_is_invalid_mapping(
    manager: PartitionManager, topic: str
) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        with pytest.raises(InvalidProducerIdMappingError):
            await c.end_txn(TID, pid + 1, epoch, commit=True)
        assert c.describe(TID).state == ONGOING

    run(scenario())


def test_concurrent_requests_of_one_id_wait_for_each_other(
    manager: PartitionManager, topic: str
) -> None:
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


def test_next_transaction_starts_with_no_partitions(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=False)
        await c.add_partitions(TID, pid, epoch, [T1])
        assert c.describe(TID).partitions == {T1}
        assert decided(manager, T0)

    run(scenario())


# ---------------------------------------------------------------------- expiry


def test_expired_transaction_is_aborted_at_a_bumped_epoch(
    manager: PartitionManager, topic: str
) -> None:
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


def test_producer_whose_transaction_expired_cannot_bump_its_way_back(
    manager: PartitionManager, topic: str
) -> None:
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


def test_transaction_within_its_timeout_is_kept(manager: PartitionManager, topic: str) -> None:
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


def test_offsets_committed_in_a_transaction_apply_on_commit(
    manager: PartitionManager, topic: str
) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        offsets = await commit_offsets_in_txn(c, commit=True)
        assert offsets.committed("g")[T0].offset == 7

    run(scenario())


def test_offsets_committed_in_a_transaction_vanish_on_abort(
    manager: PartitionManager, topic: str
) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        offsets = await commit_offsets_in_txn(c, commit=False)
        assert offsets.committed("g") == {}

    run(scenario())


# ---------------------------------------------------------------------- deleted topics


def test_transaction_over_a_deleted_topic_completes(manager: PartitionManager, topic: str) -> None:
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
