"""Group commit: one fsync makes every append waiting on it durable.

``GroupCommit`` is the one owner of a partition log's durability. It holds the *durable
position* (``LogPosition``: the high watermark - everything below it is fsynced and
visible to readers) and a *sync token*: fsyncs, rolls and high-watermark moves each hold
the token, so they happen one at a time, while appends continue during an fsync.

Two ways to wait until ``next_offset`` is durable:

- ``wait(next_offset)`` blocks. If no sync is running, the caller takes the token and runs
  the sync step itself (no hand-off to another thread); else it waits for the running one,
  and runs another if that did not cover it.
- ``future(next_offset)`` returns a ``concurrent.futures.Future`` at once (the broker wraps
  it for its event loop). If no sync is running one is started on a small process-wide
  thread pool; a sync ends by resolving every future it covered and starting the next one
  if futures are still waiting beyond it. A failed sync fails every future waiting when it
  ends (their appends are not acknowledged; a blocking waiter sees the exception itself).
  A future is marked running when it is made, so a waiter that gives up cannot cancel it
  under the thread that resolves it.

The sync step (given by the log) reads where the log ends, fsyncs up to there, moves the
high-watermark checkpoint and returns the new durable position. After every move the
listeners added with ``on_durable`` are called (on the syncing thread, still holding the
token, so in order), so that, for example, the broker wakes its fetch long-polls; a
listener that raises is logged and skipped.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from sparklog.errors import SparkLogError
from sparklog.storage.checkpoints import LogPosition

log = logging.getLogger(__name__)

SYNC_THREADS = 4
#: upper bounds (seconds) of the fsync-time buckets ``SyncTimes`` counts
SYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class SyncTimes:
    """How long segment fsyncs took, process-wide (every log of the process): counts per
    ``SYNC_BUCKETS`` bucket (cumulative, as Prometheus histograms count), their number and
    their sum. The broker's ``/metrics`` reads it (``snapshot``); storage itself only
    counts. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets = [0] * len(SYNC_BUCKETS)
        self._count = 0
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._count += 1
            self._sum += seconds
            for i, bound in enumerate(SYNC_BUCKETS):
                if seconds <= bound:
                    self._buckets[i] += 1

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Observe how long the block takes."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.observe(time.perf_counter() - began)

    def snapshot(self) -> tuple[list[tuple[float, int]], int, float]:
        """((bucket bound, cumulative count) per bucket, count, sum)."""
        with self._lock:
            return list(zip(SYNC_BUCKETS, self._buckets, strict=True)), self._count, self._sum


SYNC_TIMES = SyncTimes()

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    """The process-wide threads that run fsyncs for ``future`` waiters."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="sparklog-fsync")
        return _pool


class GroupCommit:
    """See the module docstring."""

    def __init__(
        self, sync_step: Callable[[], LogPosition], durable: LogPosition, *, label: str = ""
    ) -> None:
        self._sync_step = sync_step
        self._durable = durable
        self._label = label
        self._cond = threading.Condition()
        self._syncing = False
        self._scheduled = False
        self._waiters: list[tuple[int, Future[None]]] = []
        self._listeners: list[Callable[[LogPosition], None]] = []
        self.fsync_count = 0

    @property
    def durable(self) -> LogPosition:
        return self._durable

    def on_durable(self, listener: Callable[[LogPosition], None]) -> None:
        """Call ``listener(position)`` after every move of the durable position."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ waiting

    def wait(self, next_offset: int) -> None:
        """Block until every offset below ``next_offset`` is durable."""
        while True:
            with self._cond:
                while self._syncing and self._durable.offset < next_offset:
                    self._cond.wait()
                if self._durable.offset >= next_offset:
                    return
                self._syncing = True
            self._sync_and_release()
            if self._durable.offset >= next_offset:
                return

    def future(self, next_offset: int) -> Future[None]:
        """A future resolved once every offset below ``next_offset`` is durable."""
        fut: Future[None] = Future()
        fut.set_running_or_notify_cancel()  # cancel() is now refused: see the docstring
        with self._cond:
            if self._durable.offset >= next_offset:
                fut.set_result(None)
                return fut
            self._waiters.append((next_offset, fut))
            start = not self._syncing and not self._scheduled
            if start:
                self._scheduled = True
        if start:
            _sync_pool().submit(self._drain)
        return fut

    def _drain(self) -> None:
        with self._cond:
            self._scheduled = False
            if self._syncing or not self._waiters:
                return  # the token holder starts the next sync when it releases
            self._syncing = True
        # a failed fsync is logged by _sync_and_release, and the futures waiting are failed
        with contextlib.suppress(Exception):
            self._sync_and_release()

    def _sync_and_release(self) -> None:
        try:
            position = self._sync_step()
        except SparkLogError as e:  # refused, not broken (a fence: another broker leads)
            log.debug("%s: sync round refused: %s", self._label, e)
            self._release(None, e)
            raise
        except BaseException as e:
            log.exception("%s: fsync failed", self._label)
            self._release(None, e)
            raise
        self.fsync_count += 1
        self._release(position, None)

    def fail_waiting(self, error: Exception) -> None:
        """Fail every future still waiting (the log was given up: they are never acked)."""
        with self._cond:
            failed, self._waiters = [f for _, f in self._waiters], []
        for f in failed:
            f.set_exception(error)

    # ------------------------------------------------------------------ the token

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Callable[[LogPosition], None]]:
        """Hold the sync token (no fsync or high-watermark move meanwhile). The value is a
        function to call with the durable position the holder established, if any."""
        with self._cond:
            while self._syncing:
                self._cond.wait()
            self._syncing = True
        moved: list[LogPosition] = []
        try:
            yield moved.append
        finally:
            self._release(moved[-1] if moved else None, None)

    def _release(self, position: LogPosition | None, error: BaseException | None) -> None:
        """End a token holding: move the durable position, tell the listeners (in order:
        the token is still held), resolve the futures covered (or fail them all on an
        error), then start the next sync if futures still wait."""
        moved = False
        with self._cond:
            if position is not None and position.offset >= self._durable.offset:
                self._durable = position
                moved = True
            durable = self._durable
        if moved:
            for listener in self._listeners:
                try:
                    listener(durable)
                except Exception:
                    log.exception("%s: a durability listener failed", self._label)
        with self._cond:
            if error is not None:
                done, failed = [], [f for _, f in self._waiters]
                self._waiters = []
            else:
                done = [f for off, f in self._waiters if off <= durable.offset]
                failed = []
                self._waiters = [(off, f) for off, f in self._waiters if off > durable.offset]
            again = bool(self._waiters) and not self._scheduled
            if again:
                self._scheduled = True
            self._syncing = False
            self._cond.notify_all()
        try:
            for f in done:
                f.set_result(None)
            for f in failed:
                f.set_exception(error if isinstance(error, Exception) else RuntimeError(error))
        finally:
            if again:
                _sync_pool().submit(self._drain)
