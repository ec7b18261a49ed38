"""Group commit (``sparklog.storage.durability``): one owner of a log's durability, waited
on blocking or through futures, against a real partition log on disk."""

from __future__ import annotations

import threading
from concurrent.futures import Future, wait

import pytest

from sparklog.storage.checkpoints import LogPosition, read_high_watermark
from sparklog.storage.durability import GroupCommit
from sparklog.storage.fs.local import LocalFileSystem

from .helpers import open_log, records


def test_a_future_resolves_once_its_records_are_fsynced(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    result = log.append(records(0, 5), durable=False)
    assert log.high_watermark == 0
    fut = log.durable_future(result.last_offset + 1)
    fut.result(timeout=10)
    assert log.high_watermark == 5
    hwm = read_high_watermark(fs, log.path)
    assert hwm is not None and hwm.offset == 5  # out-of-process readers see it too


def test_a_future_for_durable_records_is_already_done(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 3))
    assert log.durable_future(3).done()


def test_one_fsync_serves_many_waiting_futures(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    before = log.fsync_count
    futures = []
    for i in range(200):
        r = log.append(records(i, 1), durable=False)
        futures.append(log.durable_future(r.last_offset + 1))
    done, _ = wait(futures, timeout=30)
    assert len(done) == 200 and all(f.exception() is None for f in done)
    assert log.high_watermark == 200
    assert log.fsync_count - before < 200


def test_listeners_hear_every_move_of_the_high_watermark(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, segment_bytes=4096)
    moves: list[int] = []
    log.on_durable(lambda pos: moves.append(pos.offset))
    for i in range(20):
        log.append(records(i * 10, 10))  # some appends roll the segment
    assert moves and moves[-1] == 200 and moves == sorted(moves)


def test_blocking_waiters_and_futures_share_syncs(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    futures: list[Future[None]] = []

    def blocking(w: int) -> None:
        for i in range(30):
            log.append(records(w * 1000 + i, 1))

    def async_(w: int) -> None:
        for i in range(30):
            r = log.append(records(w * 1000 + i, 1), durable=False)
            futures.append(log.durable_future(r.last_offset + 1))

    threads = [threading.Thread(target=f, args=(w,)) for w, f in enumerate([blocking, async_] * 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait(futures, timeout=30)
    assert all(f.done() and f.exception() is None for f in futures)
    assert log.high_watermark == 180


def test_a_failed_sync_fails_its_futures_and_later_syncs_go_on() -> None:
    outcomes = iter([OSError("disk gone"), LogPosition(0, 100, 10)])

    def step() -> LogPosition:
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    commit = GroupCommit(step, LogPosition(0, 16, 0), label="t-0")
    first = commit.future(5)
    with pytest.raises(OSError, match="disk gone"):
        first.result(timeout=10)
    assert commit.durable.offset == 0  # nothing acknowledged
    commit.future(10).result(timeout=10)
    assert commit.durable.offset == 10


def test_a_roll_holds_the_token_so_no_sync_moves_the_watermark_meanwhile() -> None:
    synced = threading.Event()

    def step() -> LogPosition:
        synced.set()
        return LogPosition(0, 50, 5)

    commit = GroupCommit(step, LogPosition(0, 16, 0))
    with commit.exclusive() as moved_to:
        fut = commit.future(5)
        assert not synced.wait(0.2) and not fut.done()  # waits for the holder
        moved_to(LogPosition(3, 16, 3))
    fut.result(timeout=10)  # the release starts the sync the future needs
    assert synced.is_set() and commit.durable == LogPosition(0, 50, 5)
