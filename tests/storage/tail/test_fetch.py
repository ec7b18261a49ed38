"""The take-overs running at once on one broker read their round objects in one batch
(``sparklog.storage.tail.fetch.SharedFetch``), and none waits for a take-over that has
nothing to read."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.tail.fetch import Fetched, SharedFetch, Wanted


def _objects(fs: LocalFileSystem, tmp_path: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = str(tmp_path / f"round-{i}")
        fs.write_atomic(path, bytes(range(i, i + 100)))
        paths.append(path)
    return paths


def _in_thread(fn: object, *args: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn(*args))  # type: ignore[operator]
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_take_overs_that_joined_together_are_read_in_one_batch(
    fs: LocalFileSystem, tmp_path: Path
) -> None:
    objects = _objects(fs, tmp_path, 3)
    shared = SharedFetch(window_s=5.0)
    a, b = shared.join(), shared.join()
    want_a: Wanted = {o: [(0, 10)] for o in objects}
    want_b: Wanted = {o: [(10, 30)] for o in objects[1:]}
    t, got_a = _in_thread(a.fetch, fs, want_a)
    got_b = b.fetch(fs, want_b)
    t.join(5)
    assert (shared.batches, shared.served) == (1, 2)
    first = got_a[0]
    assert isinstance(first, dict)
    assert first == {o: {(0, 10): bytes(range(i, i + 10))} for i, o in enumerate(objects)}
    assert got_b == {
        o: {(10, 30): bytes(range(i + 10, i + 30))} for i, o in enumerate(objects) if i > 0
    }


def test_a_lone_take_over_waits_for_nobody(fs: LocalFileSystem, tmp_path: Path) -> None:
    (obj,) = _objects(fs, tmp_path, 1)
    shared = SharedFetch(window_s=5.0)
    started = time.monotonic()
    got = shared.join().fetch(fs, {obj: [(0, 4)]})
    assert time.monotonic() - started < 1.0
    assert got == {obj: {(0, 4): bytes(range(4))}}


def test_a_take_over_that_left_without_reading_holds_no_batch(
    fs: LocalFileSystem, tmp_path: Path
) -> None:
    (obj,) = _objects(fs, tmp_path, 1)
    shared = SharedFetch(window_s=5.0)
    reader, failed = shared.join(), shared.join()
    t, got = _in_thread(reader.fetch, fs, {obj: [(0, 4)]})
    time.sleep(0.1)
    failed.leave()  # its claim failed: nothing to read
    t.join(2)
    assert not t.is_alive()
    assert got == [{obj: {(0, 4): bytes(range(4))}}]


def test_the_window_bounds_the_wait_for_a_take_over_still_claiming(
    fs: LocalFileSystem, tmp_path: Path
) -> None:
    (obj,) = _objects(fs, tmp_path, 1)
    shared = SharedFetch(window_s=0.3)
    shared.join()  # joined, never reads (a claim that hangs)
    started = time.monotonic()
    got: Fetched = shared.join().fetch(fs, {obj: [(0, 4)]})
    assert 0.3 <= time.monotonic() - started < 2.0
    assert got == {obj: {(0, 4): bytes(range(4))}}


def test_a_read_error_reaches_every_take_over_of_the_batch(
    fs: LocalFileSystem, tmp_path: Path
) -> None:
    missing = str(tmp_path / "gone")
    shared = SharedFetch(window_s=5.0)
    a, b = shared.join(), shared.join()
    t, got_a = _in_thread(a.fetch, fs, {missing: [(0, 4)]})
    with pytest.raises(FileNotFoundError):
        b.fetch(fs, {missing: [(4, 8)]})
    t.join(5)
    assert isinstance(got_a[0], FileNotFoundError)


def test_a_take_over_that_joins_after_the_cut_starts_the_next_batch(
    fs: LocalFileSystem, tmp_path: Path
) -> None:
    (obj,) = _objects(fs, tmp_path, 1)
    shared = SharedFetch(window_s=5.0)
    shared.join().fetch(fs, {obj: [(0, 4)]})
    shared.join().fetch(fs, {obj: [(4, 8)]})
    assert (shared.batches, shared.served) == (2, 2)
