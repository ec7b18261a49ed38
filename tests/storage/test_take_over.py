"""Cluster-mode take-over of a partition at a new leader epoch (``recovery.take_over``), and
what a deposed leader (a zombie: paused, or cut off from etcd, still running) can and cannot
do afterwards. Two ``PartitionLog``s over one directory stand for two brokers over shared
storage; the zombie's etcd check is the ``fence`` callable."""

from __future__ import annotations

import pytest

from sparklog.errors import LeaseLostError, NotLeaderError
from sparklog.storage import names
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.reader import PartitionReader

from .helpers import offsets, records, values


class Fence:
    """The etcd check of one broker: raises once told it no longer leads."""

    def __init__(self) -> None:
        self.deposed = False
        self.checks = 0

    def __call__(self) -> None:
        self.checks += 1
        if self.deposed:
            raise NotLeaderError("deposed")


def lead(fs: LocalFileSystem, root: str, epoch: int, fence: Fence | None = None) -> PartitionLog:
    return PartitionLog.open(
        fs, root, "t", 0, TopicConfig(), leader_epoch=epoch, fence=fence, writer=f"e{epoch}"
    )


def read_all(fs: LocalFileSystem, root: str) -> list[bytes]:
    view = PartitionReader(fs, root, "t", 0).view()
    return values(view.batches(view.log_start_offset))


def test_a_new_partition_is_taken_over_with_an_epoch_named_active_segment(
    fs: LocalFileSystem, root: str
) -> None:
    log = lead(fs, root, 3)
    assert log.manifest.leader_epoch == 3
    assert log.manifest.active.name == names.segment_name(0, kind="arrow", epoch=3)
    log.append(records(0, 4))
    assert read_all(fs, root) == [b"v0", b"v1", b"v2", b"v3"]
    assert log.epochs.leader_epochs()[-1] == (3, 0)
    log.close()


def test_take_over_freezes_the_old_active_segment_at_its_end(
    fs: LocalFileSystem, root: str
) -> None:
    old = lead(fs, root, 1)
    old.append(records(0, 5))
    new = lead(fs, root, 2)
    frozen = new.manifest.segments[0]
    assert (frozen.base_offset, frozen.next_offset) == (0, 5)
    assert new.manifest.active.name == names.segment_name(5, kind="arrow", epoch=2)
    assert new.epochs.leader_epochs()[-2:] == [(1, 0), (2, 5)]
    new.append(records(5, 2))
    assert read_all(fs, root) == [b"v%d" % i for i in range(7)]
    assert offsets(new.batches(0)) == list(range(7))
    new.close()
    old.abandon(NotLeaderError("deposed"))


def test_an_empty_active_segment_is_dropped_at_take_over(fs: LocalFileSystem, root: str) -> None:
    old = lead(fs, root, 1)
    new = lead(fs, root, 2)
    assert [s.name for s in new.manifest.segments] == [names.segment_name(0, kind="arrow", epoch=2)]
    new.close()
    old.abandon(NotLeaderError("deposed"))


def test_a_zombie_acknowledges_nothing_once_its_fence_fails(fs: LocalFileSystem, root: str) -> None:
    fence = Fence()
    zombie = lead(fs, root, 1, fence)
    zombie.append(records(0, 3))
    new = lead(fs, root, 2)
    fence.deposed = True
    with pytest.raises(NotLeaderError):
        zombie.append(records(100, 2))  # fsynced, but never acknowledged
    assert zombie.high_watermark == 3
    assert read_all(fs, root) == [b"v0", b"v1", b"v2"]
    new.close()


def test_nothing_a_zombie_writes_after_take_over_becomes_visible(
    fs: LocalFileSystem, root: str
) -> None:
    """Even a zombie whose etcd check passes after the take-over (a fence that never
    fails here) acknowledges nothing: its round finds the newer epoch in the manifest
    (``sparklog.storage.epochs``); its records stay past the frozen end, never read."""
    zombie = lead(fs, root, 1, Fence())
    zombie.append(records(0, 3))
    new = lead(fs, root, 2)
    with pytest.raises(LeaseLostError, match="leader epoch 2"):
        zombie.append(records(100, 4))  # appended and fsynced, not acknowledged
    assert zombie.high_watermark == 3
    new.append(records(3, 1))
    assert read_all(fs, root) == [b"v0", b"v1", b"v2", b"v3"]
    assert values(new.batches(0)) == [b"v0", b"v1", b"v2", b"v3"]
    new.close()


def test_a_zombies_roll_and_seal_are_refused_and_remove_nothing_of_the_leader(
    fs: LocalFileSystem, root: str
) -> None:
    zombie = lead(fs, root, 1)
    zombie.append(records(0, 3))
    new = lead(fs, root, 2)
    with pytest.raises(LeaseLostError):
        zombie.roll()
    new.roll()  # seals the frozen segment and the leader's own
    sealed = [s.name for s in new.manifest.segments if s.sealed]
    assert sealed and all(names.parse_segment_name(n).epoch == 2 for n in sealed)  # type: ignore[union-attr]
    for name in sealed:
        assert fs.exists(fs.join(new.path, name))
    assert read_all(fs, root) == [b"v0", b"v1", b"v2"]
    new.close()


def test_an_idempotent_producers_retry_gets_its_original_offsets_from_the_new_leader(
    fs: LocalFileSystem, root: str
) -> None:
    old = lead(fs, root, 1)
    first = old.append(records(0, 3), producer=ProducerBatch(7, 0, 0, 3))
    new = lead(fs, root, 2)
    retry = new.append(records(0, 3), producer=ProducerBatch(7, 0, 0, 3))
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (0, 2)
    nxt = new.append(records(3, 2), producer=ProducerBatch(7, 0, 3, 2))
    assert (first.base_offset, nxt.base_offset) == (0, 3)
    new.close()
    old.abandon(NotLeaderError("deposed"))


def test_an_older_epoch_cannot_take_over(fs: LocalFileSystem, root: str) -> None:
    lead(fs, root, 5).close()
    with pytest.raises(LeaseLostError):
        lead(fs, root, 4)


def test_a_take_over_redone_at_the_same_epoch_keeps_its_segment(
    fs: LocalFileSystem, root: str
) -> None:
    first = lead(fs, root, 1)
    first.append(records(0, 2))
    first.abandon(NotLeaderError("a retry"))
    again = lead(fs, root, 1)
    assert again.manifest.active.name == names.segment_name(0, kind="arrow", epoch=1)
    assert read_all(fs, root) == [b"v0", b"v1"]
    again.close()


def test_each_epoch_ends_where_the_next_one_starts(fs: LocalFileSystem, root: str) -> None:
    first = lead(fs, root, 1)
    first.append(records(0, 3))
    second = lead(fs, root, 4)
    second.append(records(3, 2))
    assert second.end_offset_for_epoch(1) == (1, 3)
    assert second.end_offset_for_epoch(2) == (1, 3)  # no epoch 2: epoch 1's end
    assert second.end_offset_for_epoch(0) == (0, 0)  # before the first: where that starts
    assert second.end_offset_for_epoch(4) == (4, 5)  # the current epoch: the high watermark
    assert second.end_offset_for_epoch(5) == (-1, -1)
    second.close()
    first.abandon(NotLeaderError("deposed"))
