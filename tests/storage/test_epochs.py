"""A writer that learns of another writer stops acknowledging (``sparklog.storage.epochs``).

Two ``PartitionLog``s over one partition directory stand for an embedded broker and a
foreign writer: a cluster broker taking the partition over (one of an older sparklog, which
did not check the owner record). The embedded writer has no fence: it is alone by rule, so
a newer epoch is a foreign one.
"""

from __future__ import annotations

import dataclasses

import pytest

from sparklog.errors import ForeignWriterError
from sparklog.storage import names
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import ManifestStore
from sparklog.storage.reader import PartitionReader

from .helpers import open_log, records, values


def writer(fs: LocalFileSystem, root: str) -> PartitionLog:
    """A log opened as an embedded broker opens it: open, then a new leader epoch."""
    log = open_log(fs, root)
    log.bump_leader_epoch()
    return log


def taker(fs: LocalFileSystem, root: str) -> PartitionLog:
    """A cluster broker taking the partition over at epoch 1 (the embedded one has 0)."""
    return PartitionLog.open(fs, root, "t", 0, leader_epoch=1, writer="cluster broker 2")


def test_an_append_after_another_writer_committed_an_epoch_is_not_acknowledged(
    fs: LocalFileSystem, root: str
) -> None:
    first = writer(fs, root)
    first.append(records(0, 3))
    other = taker(fs, root)
    with pytest.raises(ForeignWriterError, match="another writer .* committed leader epoch 1"):
        first.append(records(3, 2))  # appended and fsynced; the round acknowledges nothing
    assert first.high_watermark == 3
    with pytest.raises(ForeignWriterError):
        first.append(records(5, 1))  # refused before anything is written
    other.append(records(100, 1))
    view = PartitionReader(fs, root, "t", 0).view()
    assert values(view.batches(0)) == [b"v0", b"v1", b"v2", b"v100"]
    first.close()
    other.close()


def test_refresh_alone_finds_the_other_writer_and_the_log_then_touches_no_file(
    fs: LocalFileSystem, root: str
) -> None:
    first = writer(fs, root)
    first.append(records(0, 3))
    other = taker(fs, root)
    other.append(records(3, 1))
    first.refresh()
    assert isinstance(first.epochs.superseded, ForeignWriterError)
    assert first.collect_garbage(orphan_grace_ms=0).deleted == []
    recovery_point = fs.read_bytes(fs.join(first.path, names.RECOVERY_POINT_FILE))
    first.close()  # writes no checkpoint, no producer snapshot
    assert fs.read_bytes(fs.join(first.path, names.RECOVERY_POINT_FILE)) == recovery_point
    other.close()


def test_a_commit_that_keeps_the_epoch_does_not_stop_the_writer(
    fs: LocalFileSystem, root: str
) -> None:
    """Retention and compaction jobs commit without bumping the epoch: no false alarm."""
    log = writer(fs, root)
    log.append(records(0, 2))
    job = ManifestStore(fs, log.path, writer="retention")
    job.commit(lambda m: dataclasses.replace(m))  # a new version, the same epoch
    log.append(records(2, 2))
    assert log.high_watermark == 4 and log.epochs.superseded is None
    log.close()


def test_fence_writes_fails_waiting_appends_and_refuses_new_ones(
    fs: LocalFileSystem, root: str
) -> None:
    log = writer(fs, root)
    r = log.append(records(0, 2), durable=False)
    log.epochs.fence_writes(ForeignWriterError("the owner record changed"))
    with pytest.raises(ForeignWriterError, match="owner record"):
        log.wait_durable(r.last_offset + 1)
    with pytest.raises(ForeignWriterError, match="owner record"):
        log.append(records(2, 1))
    log.close()
