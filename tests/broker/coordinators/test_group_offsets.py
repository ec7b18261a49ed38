"""Committed group offsets (``OffsetStore``) driven directly over a real ``PartitionManager``:
commits, deletes and tombstones, transactional commits held apart until their marker, and
the replay of ``__consumer_offsets`` that restores all of it after a restart."""

from __future__ import annotations

import json
from pathlib import Path

from sparklog.broker.config import BrokerConfig
from sparklog.broker.coordinators.group_offsets import (
    OFFSETS_TOPIC,
    CommitEntry,
    offsets_partition,
)
from sparklog.broker.partitions import PartitionManager
from sparklog.storage.store import Storage

from .helpers import open_offsets, run

T0 = ("t", 0)
T1 = ("t", 1)


def test_commit_is_the_groups_offset(manager: PartitionManager) -> None:
    async def scenario() -> None:
        store = open_offsets(manager)
        await store.commit("g", [CommitEntry("t", 0, 5, leader_epoch=2, metadata="m")])
        c = store.committed("g")[T0]
        assert (c.offset, c.leader_epoch, c.metadata) == (5, 2, "m")
        assert store.committed("other") == {}

    run(scenario())


def test_commit_is_durable_when_answered(manager: PartitionManager) -> None:
    """A commit returns once its record is fsynced: it is below the partition's high
    watermark, in the documented key format."""

    async def scenario() -> None:
        store = open_offsets(manager)
        await store.commit("g", [CommitEntry("t", 0, 5)])
        plog = manager.partition(OFFSETS_TOPIC, offsets_partition("g")).log
        keys = [
            json.loads(k)
            for b in plog.batches(plog.log_start_offset, plog.high_watermark)
            for k in b.column("key").to_pylist()
        ]
        assert ["offset", "g", "t", 0] in keys

    run(scenario())


def test_later_commit_wins(manager: PartitionManager) -> None:
    async def scenario() -> None:
        store = open_offsets(manager)
        await store.commit("g", [CommitEntry("t", 0, 5)])
        await store.commit("g", [CommitEntry("t", 0, 9)])
        assert store.committed("g")[T0].offset == 9

    run(scenario())


def test_delete_offsets_leaves_the_others(manager: PartitionManager) -> None:
    async def scenario() -> None:
        store = open_offsets(manager)
        await store.commit("g", [CommitEntry("t", 0, 5), CommitEntry("t", 1, 6)])
        await store.delete_offsets("g", [T0, ("t", 7)])  # t-7 has none: skipped
        assert set(store.committed("g")) == {T1}

    run(scenario())


def test_delete_group_forgets_every_offset(manager: PartitionManager) -> None:
    async def scenario() -> None:
        store = open_offsets(manager)
        await store.commit("g", [CommitEntry("t", 0, 5), CommitEntry("t", 1, 6)])
        await store.delete_group("g")
        assert store.committed("g") == {} and "g" not in store.offsets

    run(scenario())


def test_replay_restores_commits_and_deletes(tmp_path: Path) -> None:
    """A restarted broker replays ``__consumer_offsets``: commits and tombstones alike."""
    data = str(tmp_path / "data")

    async def first() -> None:
        m = PartitionManager(BrokerConfig(data_dir=data), Storage(data))
        try:
            store = open_offsets(m)
            await store.commit("g", [CommitEntry("t", 0, 5), CommitEntry("t", 1, 6)])
            await store.delete_offsets("g", [T1])
        finally:
            m.close()

    async def second() -> dict[tuple[str, int], int]:
        m = PartitionManager(BrokerConfig(data_dir=data), Storage(data))
        try:
            return {k: v.offset for k, v in open_offsets(m).committed("g").items()}
        finally:
            m.close()

    run(first())
    assert run(second()) == {T0: 5}


def test_transactional_commit_waits_for_its_marker(manager: PartitionManager) -> None:
    """TxnOffsetCommit: the offsets are pending (KIP-447's unstable) until the marker."""

    async def scenario() -> None:
        store = open_offsets(manager)
        await store.txn_commit("g", 42, 0, [CommitEntry("t", 0, 5)])
        assert store.unstable("g") == {T0} and store.committed("g") == {}
        store.complete_txn(offsets_partition("g"), 42, commit=True)
        assert store.unstable("g") == set() and store.committed("g")[T0].offset == 5

    run(scenario())


def test_aborted_transactional_commit_vanishes(manager: PartitionManager) -> None:
    async def scenario() -> None:
        store = open_offsets(manager)
        await store.commit("g", [CommitEntry("t", 0, 3)])
        await store.txn_commit("g", 42, 0, [CommitEntry("t", 0, 5)])
        store.complete_txn(offsets_partition("g"), 42, commit=False)
        assert store.unstable("g") == set() and store.committed("g")[T0].offset == 3

    run(scenario())


def test_replay_keeps_an_undecided_transactional_commit_pending(tmp_path: Path) -> None:
    data = str(tmp_path / "data")

    async def first() -> None:
        m = PartitionManager(BrokerConfig(data_dir=data), Storage(data))
        try:
            await open_offsets(m).txn_commit("g", 42, 0, [CommitEntry("t", 0, 5)])
        finally:
            m.close()

    async def second() -> tuple[set[tuple[str, int]], int]:
        m = PartitionManager(BrokerConfig(data_dir=data), Storage(data))
        try:
            store = open_offsets(m)
            return store.unstable("g"), len(store.committed("g"))
        finally:
            m.close()

    run(first())
    assert run(second()) == ({T0}, 0)
