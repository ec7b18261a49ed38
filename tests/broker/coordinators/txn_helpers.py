"""What the transaction coordinator's tests share: a coordinator as an embedded broker
builds it, a transactional record, what a partition's readers see of transactions, and
``__transaction_state`` records read and written in their documented format."""

from __future__ import annotations

import json

import pyarrow as pa

from sparklog.broker.coordinators.transactions import (
    TXN_TOPIC,
    TransactionCoordinator,
    TxnMeta,
    txn_partition,
)
from sparklog.broker.partitions import PartitionManager
from sparklog.storage.producers import ProducerBatch

from .helpers import open_offsets

TID = "txn-1"
TOPIC = "t"
T0 = (TOPIC, 0)
T1 = (TOPIC, 1)


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
