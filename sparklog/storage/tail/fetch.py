"""The ranged GETs of the cache rebuilds that run at once on one broker, made together.

A broker's rounds carry every partition it leads, one object per round. When it dies, its
successor takes several of those partitions over at once (one take-over thread each), and
each rebuild (``rebuild.materialize``) wants a slice of the same round objects: alone,
every take-over GETs every object again, k partitions making k x the requests for bytes
that sit side by side. ``SharedFetch`` makes them one batch: the ranges of every
participant are merged per object and read together (``FileSystem.read_ranges``; on S3
obstore coalesces nearby ranges of one object into one GET), ``FETCH_THREADS`` objects at
a time, and each participant gets its own ranges back.

Who waits for whom: a take-over joins (``join``) before its claim and leaves at its
fetch, or when it ends without one (a failed claim, nothing to fetch). The first to
fetch leads the batch: it waits, at most ``WINDOW_S``, until every take-over that joined
has fetched or left, then reads for all of them; the others wait for its result (an
error it met is theirs too). A take-over that joins after the batch was cut starts the
next one. A lone take-over - the usual case outside a failure - waits for nobody.
Take-overs queued behind the broker's take-over threads have not joined, so a batch
never waits for a thread that cannot run.

Thread-safe; one per broker (``BrokerTail.fetches``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sparklog.storage.fs import FileSystem

#: objects read at once by a batch
FETCH_THREADS = 16
#: how long the first take-over to fetch waits for the others that joined before it
WINDOW_S = 0.25

Range = tuple[int, int]
Wanted = dict[str, list[Range]]  # object path -> its byte ranges
Fetched = dict[str, dict[Range, bytes]]


class _Batch:
    def __init__(self) -> None:
        self.wanted: dict[str, set[Range]] = {}
        self.done = threading.Event()
        self.got: Fetched = {}
        self.error: BaseException | None = None

    def add(self, wanted: Wanted) -> None:
        for obj, ranges in wanted.items():
            self.wanted.setdefault(obj, set()).update(ranges)


class Participant:
    """One take-over's place in a ``SharedFetch`` (``fetch`` once, else ``leave``)."""

    def __init__(self, shared: SharedFetch) -> None:
        self._shared = shared
        self._open = True

    def fetch(self, fs: FileSystem, wanted: Wanted) -> Fetched:
        """The bytes of ``wanted`` (object path -> ranges), read in the current batch."""
        if not self._open:
            raise RuntimeError("a take-over fetches once")
        self._open = False
        return self._shared._fetch(fs, wanted)

    def leave(self) -> None:
        """Nothing (more) to fetch: the batch no longer waits for this take-over."""
        if self._open:
            self._open = False
            self._shared._leave()


class SharedFetch:
    """See the module docstring."""

    def __init__(
        self,
        window_s: float = WINDOW_S,
        threads: int = FETCH_THREADS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.threads = threads
        self._clock = clock
        self._cond = threading.Condition()
        self._joined = 0  # take-overs that joined and have not fetched or left
        self._batch: _Batch | None = None  # the batch still taking ranges
        #: batches read, and the take-overs they served (for tests and the broker log)
        self.batches = 0
        self.served = 0

    def join(self) -> Participant:
        with self._cond:
            self._joined += 1
        return Participant(self)

    def _leave(self) -> None:
        with self._cond:
            self._joined -= 1
            self._cond.notify_all()

    def _fetch(self, fs: FileSystem, wanted: Wanted) -> Fetched:
        with self._cond:
            self._joined -= 1
            batch = self._batch
            leads = batch is None
            if batch is None:
                batch = self._batch = _Batch()
            batch.add(wanted)
            self.served += 1
            self._cond.notify_all()
            if leads:
                deadline = self._clock() + self.window_s
                while self._joined > 0 and (left := deadline - self._clock()) > 0:
                    self._cond.wait(left)
                self._batch = None  # cut: who comes now starts the next batch
                self.batches += 1
        if leads:
            try:
                batch.got = _read(fs, batch.wanted, self.threads)
            except BaseException as e:
                batch.error = e
            finally:
                batch.done.set()
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return {obj: {r: batch.got[obj][r] for r in ranges} for obj, ranges in wanted.items()}


def _read(fs: FileSystem, wanted: dict[str, set[Range]], threads: int) -> Fetched:
    """Every object's ranges, ``threads`` objects at a time."""
    items = [(obj, sorted(ranges)) for obj, ranges in wanted.items()]
    if not items:
        return {}

    def one(item: tuple[str, list[Range]]) -> dict[Range, bytes]:
        obj, ranges = item
        return dict(zip(ranges, fs.read_ranges(obj, ranges), strict=True))

    with ThreadPoolExecutor(max(1, min(threads, len(items)))) as pool:
        return dict(zip((obj for obj, _ in items), pool.map(one, items), strict=True))
