"""Consumer lag health, Burrow's way: a status per group and partition from a window of
samples, rather than a threshold on one lag figure.

``LagMonitor.sample`` records, per (group, topic, partition), the committed offset, the
time of that commit and the log end offset (the high watermark), at most once per
``interval_s``; the last ``window`` samples are kept (in memory: a restarted broker
starts a new window, and a group's status is OK until it has two samples, but for STOP,
which one sample shows: it carries the last commit's time). ``evaluate``
applies these rules, in this order (LinkedIn Burrow's consumer evaluation rules):

1. **OK** if the lag was zero in any sample of the window: the consumer caught up.
2. **REWIND** if the committed offset went back between two samples (offsets reset, or
   a consumer restarted from an earlier position).
3. **STOP** if the last commit is older than the window's span (``window * interval_s``)
   while there is lag: the consumer stopped committing.
4. **STALL** if the committed offset did not move across the window while commits kept
   coming and there is lag: a consumer that commits but makes no progress.
5. **WARN** if the lag grew from sample to sample across the whole window (never
   shrinking) while the consumer moved: it is falling behind.
6. **OK** otherwise.

A group's status is the worst of its partitions' (OK < WARN < REWIND < STALL < STOP).
Partitions without a committed offset have no status (and no lag series). The broker
samples on its maintenance tick and when ``/metrics`` is scraped, on worker threads:
thread-safe.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

OK, WARN, REWIND, STALL, STOP = "OK", "WARN", "REWIND", "STALL", "STOP"
#: worst last: a group's status is the highest of its partitions'
STATUSES = (OK, WARN, REWIND, STALL, STOP)


@dataclass(frozen=True)
class Sample:
    """One look at a group's partition: when, the committed offset and its commit time
    (ms), and the log end offset then."""

    at_s: float
    committed: int
    commit_ms: int
    log_end: int

    @property
    def lag(self) -> int:
        return max(self.log_end - self.committed, 0)


def evaluate(samples: Iterable[Sample], now_s: float, span_s: float) -> str:
    """The status of one partition's window (module docstring), oldest sample first."""
    window = list(samples)
    if not window:
        return OK
    if any(s.lag == 0 for s in window):
        return OK
    if any(b.committed < a.committed for a, b in pairwise(window)):
        return REWIND
    last = window[-1]
    if now_s - last.commit_ms / 1000 > span_s:
        return STOP
    if len(window) < 2:
        return OK
    first = window[0]
    if last.committed == first.committed and last.commit_ms > first.commit_ms:
        return STALL
    lags = [s.lag for s in window]
    growing = all(b >= a for a, b in pairwise(lags)) and lags[-1] > lags[0]
    if growing and last.committed > first.committed:
        return WARN
    return OK


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=STATUSES.index, default=OK)


Key = tuple[str, str, int]  # group, topic, partition


class LagMonitor:
    """See the module docstring."""

    def __init__(self, window: int = 10, interval_s: float = 10.0) -> None:
        if window < 2:
            raise ValueError(f"a lag window needs at least 2 samples, got {window}")
        self.window = window
        self.interval_s = interval_s
        self._samples: dict[Key, deque[Sample]] = {}
        self._lock = threading.Lock()

    @property
    def span_s(self) -> float:
        return self.window * self.interval_s

    def sample(self, key: Key, committed: int, commit_ms: int, log_end: int, now_s: float) -> None:
        """Record one look, unless the last was less than ``interval_s`` ago."""
        with self._lock:
            q = self._samples.get(key)
            if q is None:
                q = self._samples[key] = deque(maxlen=self.window)
            if q and now_s - q[-1].at_s < self.interval_s:
                return
            q.append(Sample(now_s, committed, commit_ms, log_end))

    def forget(self, keep: set[Key]) -> None:
        """Drop the windows of partitions no longer committed (deleted groups, offsets
        moved to another coordinator)."""
        with self._lock:
            for key in [k for k in self._samples if k not in keep]:
                del self._samples[key]

    def status(self, key: Key, now_s: float) -> str:
        with self._lock:
            window = list(self._samples.get(key, ()))
        return evaluate(window, now_s, self.span_s)
