"""The transaction coordinator's checks of other requests, driven directly: KIP-890's
check of a transactional produce (``verify``) and the epoch check of TxnOffsetCommit
(``check_epoch``).

The spec is Apache Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``
(``transaction-coordinator`` / ``core``); a test's docstring says what Kafka answers where it
pins that down, read from that source, and where sparklog answers differently on purpose
(docs/transactions.md: requests of one id wait for each other instead of getting
CONCURRENT_TRANSACTIONS)."""

from __future__ import annotations

import pytest

from sparklog.broker.partitions import PartitionManager
from sparklog.errors import (
    InvalidTxnStateError,
    ProducerFencedError,
)

from .helpers import run
from .txn_helpers import (
    T0,
    T1,
    TID,
    begin,
    coordinator,
)

# ---------------------------------------------------------------------- produce checks


def test_produce_to_an_added_partition_is_verified(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        c.verify(TID, pid, epoch, T0)

    run(scenario())


def test_produce_to_a_partition_not_added_is_invalid_txn_state(
    manager: PartitionManager, topic: str
) -> None:
    """KIP-890: a transactional batch to a partition the transaction did not add is
    refused (INVALID_TXN_STATE)."""

    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        with pytest.raises(InvalidTxnStateError):
            c.verify(TID, pid, epoch, T1)

    run(scenario())


def test_produce_after_the_transaction_ended_is_invalid_txn_state(
    manager: PartitionManager, topic: str
) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.end_txn(TID, pid, epoch, commit=True)
        with pytest.raises(InvalidTxnStateError):
            c.verify(TID, pid, epoch, T0)

    run(scenario())


def test_produce_from_a_fenced_epoch_is_fenced(manager: PartitionManager, topic: str) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        pid, epoch = await begin(c, manager)
        await c.init_producer_id(TID, 60_000)
        with pytest.raises(ProducerFencedError):
            c.verify(TID, pid, epoch, T0)
        with pytest.raises(ProducerFencedError):
            c.check_epoch(TID, pid, epoch)

    run(scenario())


def test_ids_this_coordinator_does_not_know_are_not_checked(
    manager: PartitionManager, topic: str
) -> None:
    async def scenario() -> None:
        c = coordinator(manager)
        c.verify("elsewhere", 5, 0, T0)
        c.check_epoch("elsewhere", 5, 0)

    run(scenario())
