"""What every coordinator test shares: the coordinators are driven directly, as the broker
builds them (``sparklog.broker.server.Broker.start``); each test's scenario runs on its own
asyncio loop (``run``). Timers are real: tests use short timeouts and wait for the event
they check (``eventually``), with deadlines generous enough for a loaded machine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sparklog.broker.coordinators.group_offsets import OffsetStore
from sparklog.broker.partitions import PartitionManager

T = TypeVar("T")

#: how long a scenario may take before the test fails (a hang is a failure, not a stall)
SCENARIO_DEADLINE_S = 60.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one scenario on a fresh event loop, failing it after ``SCENARIO_DEADLINE_S``."""
    return asyncio.run(asyncio.wait_for(coro, SCENARIO_DEADLINE_S))


async def eventually(check: Callable[[], bool], what: str, deadline_s: float = 20.0) -> None:
    """Wait until ``check()`` holds, polling; fail naming ``what`` after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        await asyncio.sleep(0.01)


def open_offsets(manager: PartitionManager) -> OffsetStore:
    """``__consumer_offsets`` replayed, as an embedded broker starts it; inside the
    scenario's loop (an opened partition wakes waiters on the loop that opened it)."""
    store = OffsetStore(manager)
    store.load()
    return store
