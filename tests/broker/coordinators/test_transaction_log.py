"""The transaction coordinator's log, ``__transaction_state``, driven directly: one record
per state change, replay, a crash after ``Prepare*``, partitions handed between brokers.

The spec is Apache Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``
(``transaction-coordinator`` / ``core``); a test's docstring says what Kafka answers where it
pins that down, read from that source, and where sparklog answers differently on purpose
(docs/transactions.md: requests of one id wait for each other instead of getting
CONCURRENT_TRANSACTIONS)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparklog.broker.coordinators.transactions import (
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_COMMIT,
    txn_partition,
)
from sparklog.broker.partitions import PartitionManager
from sparklog.errors import (
    TransactionalIdNotFoundError,
)

from .helpers import eventually, run
from .txn_helpers import (
    T0,
    TID,
    aborted_by,
    begin,
    coordinator,
    decided,
    stored_states,
    write_state,
)

# ---------------------------------------------------------------------- durable state


def test_every_state_change_is_one_record(manager: PartitionManager, topic: str) -> None:
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


def test_replay_restores_the_state(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        await begin(c, manager)
        before = c.describe(TID)
        after = coordinator(manager).describe(TID)
        assert replace(after, update_ms=0) == replace(before, update_ms=0)

    run(scenario())


def test_replay_finishes_a_prepared_transaction(manager: PartitionManager, topic: str) -> None:
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


def test_a_dropped_partition_forgets_its_ids_until_loaded_again(
    manager: PartitionManager, topic: str
) -> None:
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


def test_unknown_id_is_not_found(manager: PartitionManager) -> None:
    async def scenario() -> None:
        with pytest.raises(TransactionalIdNotFoundError):
            coordinator(manager).describe("nobody")

    run(scenario())
