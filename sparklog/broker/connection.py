"""One client connection of the broker (as aiokafka's ``conn.py`` is one of the client).

A ``Connection`` knows who is on the other end: the peer address, the listener the client
reached (the address the broker advertises to it in Metadata and FindCoordinator), and the
client software it named in ApiVersions v3+ (in the broker's log lines about the
connection), and who the client is: its ``principal`` - ``User:ANONYMOUS`` on PLAINTEXT,
``User:<CN>`` of a client certificate on SSL, the SASL user once a SASL listener's
exchange succeeded. Every handler sees it through ``RequestContext.connection``.

Before a SASL listener's client has authenticated (``authenticated`` false), frames are
limited to ``sasl_max_receive_bytes`` (Kafka's 512 KiB: an unauthenticated client cannot
make the broker allocate more; CVE-2022-34917) and are processed one at a time, so the
limit and the state change together; the dispatcher lets only ApiVersions and the SASL
requests through. ``close_after_response`` ends the connection once the response of the
request that set it is written (a failed authentication). While ``raw_tokens`` is set (after
a SaslHandshake v0, KIP-152), a frame is not a request but a SASL token, of any size from 0
to the limit: it goes to ``raw_tokens`` instead of the dispatcher, which returns the whole
answer frame (or None), and clears it when the exchange ends.

``serve`` is the connection's request loop. Requests are read ahead and processed as they
arrive, up to ``max_inflight`` at a time and ``max_inflight_bytes`` of request frames and
responses not yet written (a client pipelining produce requests need not wait for each
fsync or flush round; a frame larger than the budget is still taken when nothing else is
in flight, and a request's bytes are released once its response is written); responses go
back strictly in request order (Kafka's contract with clients that pipeline). Each handler
runs up to its first await before the next one starts, so appends happen in request order
too, which idempotent producers rely on. A frame whose declared size is negative or above
``socket_request_max_bytes`` closes the connection before its body is read; so does a
frame the dispatcher refuses (``FrameError``). Memory per connection is bounded by
``max_inflight_bytes`` (requests read stop while it is exceeded), give or take the last
request let in and the responses computed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Coroutine
from typing import Any

from sparklog.errors import FrameError
from sparklog.kafka.address import Listener
from sparklog.security.acls import ANONYMOUS

log = logging.getLogger("sparklog.broker")

Dispatch = Callable[["Connection", bytes], Coroutine[Any, Any, bytes | None]]
RawTokens = Callable[[bytes], Coroutine[Any, Any, bytes | None]]


class Connection:
    """See the module docstring."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        advertised_host: str,
        advertised_port: int,
        max_request_bytes: int,
        max_inflight: int,
        max_inflight_bytes: int = 64 * 1024 * 1024,
        listener: Listener | None = None,
        sasl_max_receive_bytes: int = 512 * 1024,
        principal: str | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.peer: tuple[str, int] = (str(peer[0]), int(peer[1])) if peer else ("", 0)
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.client_software: tuple[str, str] | None = None
        self._max_request_bytes = max_request_bytes
        self._max_inflight = max_inflight
        self._max_inflight_bytes = max_inflight_bytes
        self.listener = listener
        self.protocol = listener.security_protocol if listener else "PLAINTEXT"
        self.principal = principal or ANONYMOUS
        self.authenticated = not (listener is not None and listener.sasl)
        self.sasl: Any = None  # the SASL exchange in progress (sparklog.security.sasl)
        self.raw_tokens: RawTokens | None = None  # frames are raw SASL tokens (handshake v0)
        self.session_expiry: float | None = None  # monotonic; KIP-368 re-authentication
        self.close_after_response = False
        self._sasl_max = sasl_max_receive_bytes

    @property
    def frame_limit(self) -> int:
        return self._max_request_bytes if self.authenticated else self._sasl_max

    @property
    def peer_host(self) -> str:
        return self.peer[0]

    def __str__(self) -> str:
        software = f" ({' '.join(self.client_software)})" if self.client_software else ""
        who = f" {self.principal}" if self.principal != ANONYMOUS else ""
        return f"{self.peer[0]}:{self.peer[1]}{software}{who}"

    async def serve(self, dispatch: Dispatch) -> None:
        """Serve requests until the client closes, breaks a rule, or the task is cancelled."""
        inflight: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(
            self._max_inflight
        )
        writer = self._writer
        sizes: dict[asyncio.Task[bytes | None], int] = {}
        held = [0]  # bytes of the requests in flight and of their responses not yet written
        freed = asyncio.Event()

        async def respond() -> None:
            while True:
                item = await inflight.get()
                if item is None:
                    return
                try:
                    response = await item
                    if response is not None:
                        writer.write(response)
                        await writer.drain()
                finally:
                    held[0] -= sizes.pop(item, 0)
                    freed.set()
                if self.close_after_response:
                    return

        def hold_response(task: asyncio.Task[bytes | None]) -> None:
            """A response waiting for those before it counts too, until written."""
            if task.cancelled() or task.exception() is not None or task not in sizes:
                return
            extra = len(task.result() or b"")
            sizes[task] += extra
            held[0] += extra

        responder = asyncio.get_running_loop().create_task(respond())
        # the request loop awaits its reads directly: if the responder ends first (an error,
        # close_after_response), it cancels the loop, instead of every read racing it
        me = asyncio.current_task()
        awaiting_responder = finished = False

        def responder_ended(_task: asyncio.Task[None]) -> None:
            if not (awaiting_responder or finished) and me is not None:
                me.cancel()

        responder.add_done_callback(responder_ended)
        reader = self._reader
        pending: list[asyncio.Task[bytes | None]] = []
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise
                    break  # the client finished sending: answer what it sent, then close
                (size,) = struct.unpack(">i", head)
                limit = self.frame_limit
                raw = self.raw_tokens
                if size < (0 if raw else 8) or size > limit:
                    log.warning(
                        "closing %s: request of %d bytes (limit %d%s)",
                        self,
                        size,
                        limit,
                        "" if self.authenticated else " before authentication",
                    )
                    break
                while held[0] and held[0] + size > self._max_inflight_bytes:
                    freed.clear()
                    await freed.wait()
                frame = await reader.readexactly(size)
                if responder.done():  # ended while the frame was read: nobody would answer
                    break
                job = raw(frame) if raw is not None else dispatch(self, frame)
                work = asyncio.get_running_loop().create_task(job)
                sizes[work] = size
                held[0] += size
                work.add_done_callback(hold_response)
                pending = [t for t in pending if not t.done()]
                pending.append(work)
                await inflight.put(work)
                if not self.authenticated:  # one at a time until authenticated
                    await asyncio.wait({work, responder}, return_when=asyncio.FIRST_COMPLETED)
            await inflight.put(None)
            awaiting_responder = True
            await responder
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except FrameError as e:
            log.warning("closing %s: %s", self, e)
        except Exception:
            log.exception("closing %s after an unexpected error", self)
        finally:
            finished = True  # a cancel the responder's end already scheduled is not ours
            responder.remove_done_callback(responder_ended)
            if responder.done() and not awaiting_responder:
                self._responder_ended(responder)
            responder.cancel()
            for t in pending:
                t.cancel()
            writer.close()

    def _responder_ended(self, responder: asyncio.Task[None]) -> None:
        """Log why the responder ended the connection (an answer the dispatcher refused to
        give, an unexpected error; a closed socket or a cancellation is not worth it)."""
        if responder.cancelled():
            return
        e = responder.exception()
        if isinstance(e, FrameError):
            log.warning("closing %s: %s", self, e)
        elif e is not None and not isinstance(e, ConnectionError | asyncio.IncompleteReadError):
            log.error("closing %s after an unexpected error", self, exc_info=e)
