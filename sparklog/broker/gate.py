"""The gate of a partition being taken over (cluster mode): its produce requests wait there,
and pass in the order they arrived.

Why a gate and not an event. An idempotent producer pipelines its batches, and a broker
must append them in the order it read them: the connection starts each request's handler
in that order (``sparklog.broker.connection``), and a handler that does not wait appends
at once. Requests that reach a new leader during its take-over wait for it; with an event,
a request read just *after* the take-over ended did not wait and appended before the ones
still waking up from the event - found on object storage (2026-11-28): a retry of
sequences 2656-2657 waited, 2658 (read after the install) went first and was refused as
out of order, the retry then succeeded, and librdkafka, seeing 2658 refused after the
batch before it was acknowledged, failed the producer for good ("sequence
desynchronization"). A gate keeps one order for all of them:

- ``enter`` waits for this request's turn: at once if the gate is open and nobody is in
  it or queued, else behind everyone who entered before, the requests that entered while
  the take-over ran included;
- the request holds the gate until its batch is appended (``leave``), which passes the
  turn to the next;
- ``open`` (the take-over ended, installed or not) lets the first waiter through; the
  manager drops the gate once it is open and empty (``idle``), and a request that arrives
  after that appends at once, behind nobody.

A request that waited too long (``PartitionManager.until_taken_over``'s timeout) gives up
its place and goes on without the gate (it is answered NOT_LEADER_OR_FOLLOWER when the
take-over has not ended).
"""

from __future__ import annotations

import asyncio
from collections import deque


class TakeOverGate:
    """See the module docstring. Used on the broker's event loop only."""

    def __init__(self) -> None:
        self.opened = False
        self._queue: deque[asyncio.Future[None]] = deque()
        self._held = False  # a request passed and has not left yet

    @property
    def idle(self) -> bool:
        """Open, and nobody in it or waiting: the manager may drop it."""
        return self.opened and not self._held and not self._queue

    def close(self) -> None:
        """Another take-over of the partition started: new arrivals wait again."""
        self.opened = False

    async def enter(self) -> None:
        """Return when it is this request's turn (it then holds the gate until ``leave``)."""
        if self.opened and not self._held and not self._queue:
            self._held = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.leave()  # the turn came with the cancellation: pass it on
            else:
                turn.cancel()  # skipped by ``_next``
            raise

    def open(self) -> None:
        """The take-over ended: the first waiter passes."""
        self.opened = True
        if not self._held:
            self._next()

    def leave(self) -> None:
        """The request holding the gate appended its batch: the next one passes."""
        self._held = False
        if self.opened:
            self._next()

    def _next(self) -> None:
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(None)
                self._held = True
                return
