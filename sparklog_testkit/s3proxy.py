"""An HTTP proxy in front of an S3 server that a test makes fail (object-store fault tests).

``S3FaultProxy(target)`` listens on a free port of 127.0.0.1 and forwards to ``target`` (the
S3 server's ``http://host:port``). Clients reach it as their S3 endpoint: in this process
(``S3FileSystem(..., endpoint=proxy.endpoint)``) or in child processes, whose environment
gets ``proxy.env(server.env())`` (``AWS_ENDPOINT_URL`` and ``AWS_ENDPOINT_URL_S3`` set to
the proxy). It runs on threads of the test process: ``with S3FaultProxy(...) as proxy:``,
or ``start()`` and ``close()``.

Forwarding is byte for byte: requests reach the server with exactly the bytes, and so the
headers, the client signed (AWS SigV4 signs ``Host``, which names the proxy; the server
checks the signature against the ``Host`` it receives, so it holds). The proxy parses only
enough HTTP/1.1 to find where each request and response ends (``Content-Length`` or chunked
bodies; keep-alive connections carry one request after another), so that it can decide per
request.

What it does with a request is its mode, which the test switches at run time; every mode
but ``pass_through`` takes ``methods`` (only requests of these HTTP methods are faulted,
the others pass: PUTs fail while GETs work) and ``count`` (only the next ``count`` matching
requests are faulted, then the proxy passes everything again):

- ``pass_through()``: forward (the mode it starts in);
- ``error(status)``: answer with an S3 error document and that status without forwarding
  (500 ``InternalError``, 503 ``SlowDown``, others ``ServiceUnavailable``); the request's
  body is read and dropped, and the connection stays open as a real server's would;
- ``fail_next(n, status)``: ``error(status, count=n)``;
- ``reset()``: close the client's connection with a TCP RST (``SO_LINGER`` 0) when a
  request arrives; without ``methods`` or ``count``, every open connection is reset at
  once too (idle keep-alive ones and ones in the middle of a request);
- ``stall()``: hold requests unanswered (nothing forwarded) until the mode changes; a held
  request is then handled by the new mode (the client has usually given up by then);
- ``drop_response()``: forward the request, read the server's whole answer, and reset the
  client's connection instead of passing the answer on: the request took effect and the
  client never learns it (a lost answer).

Apart from the mode, ``throttle(bytes_per_second)`` slows every connection's bodies, both
ways, to that rate (a slow link; ``None`` lifts it).

Counters: ``requests`` (every request seen, by method), ``faulted`` (requests a fault
applied to, by method), ``held`` (requests stalled right now); ``wait_requests`` waits
until some number of requests have arrived; ``history`` lists the last requests as
``(method, target, what was done)``.

Dev only (sparklog_testkit is not in the wheel).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

Kind = Literal["pass", "error", "reset", "stall", "drop"]

_S3_CODES = {500: "InternalError", 503: "SlowDown"}
_S3_MESSAGES = {
    "InternalError": "We encountered an internal error. Please try again.",
    "SlowDown": "Please reduce your request rate.",
    "ServiceUnavailable": "The service is unavailable. Please retry.",
}
_HEAD_LIMIT = 64 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class _Fault:
    kind: Kind
    status: int = 503
    methods: frozenset[str] | None = None

    def applies_to(self, method: str) -> bool:
        return self.methods is None or method in self.methods


class _Killed(Exception):
    """The test reset this connection (or the proxy closed): end it with a RST."""


class _Conn:
    """One client connection and the upstream connection it forwards to."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.killed = False

    def kill(self) -> None:
        """Wakes whatever this connection's thread is blocked in; it then sends the RST."""
        self.killed = True
        for s in (self.client, self.upstream):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RD)


class _Reader:
    """Buffered reads from one socket, by line, by length, until close; what it moves to
    another socket is paced by ``pace`` (called with each piece's length)."""

    def __init__(self, conn: _Conn, sock: socket.socket, pace: Callable[[int], None]) -> None:
        self.conn = conn
        self.sock = sock
        self.pace = pace
        self.buf = b""

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(_CHUNK)
        except OSError:
            data = b""
        if self.conn.killed:
            raise _Killed
        self.buf += data
        return bool(data)

    def head(self) -> bytes | None:
        """Bytes up to and including the blank line after the headers; None at a clean EOF."""
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            if len(self.buf) > _HEAD_LIMIT:
                raise ConnectionError("HTTP head too long")
            if not self._fill():
                if self.buf:
                    raise ConnectionError("connection closed inside an HTTP head")
                return None
        head, self.buf = self.buf[: end + 4], self.buf[end + 4 :]
        return head

    def line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            if not self._fill():
                raise ConnectionError("connection closed inside a chunked body")
        line, self.buf = self.buf[: end + 2], self.buf[end + 2 :]
        return line

    def copy(self, n: int, out: socket.socket | None) -> None:
        """Moves exactly ``n`` bytes to ``out`` (None: drops them)."""
        while n > 0:
            if not self.buf and not self._fill():
                raise ConnectionError("connection closed inside a body")
            part, self.buf = self.buf[:n], self.buf[n:]
            n -= len(part)
            if out is not None:
                out.sendall(part)
                self.pace(len(part))

    def copy_until_close(self, out: socket.socket | None) -> None:
        while True:
            if self.buf and out is not None:
                out.sendall(self.buf)
                self.pace(len(self.buf))
            self.buf = b""
            if not self._fill():
                return

    def body(self, headers: Mapping[str, str], out: socket.socket | None) -> bool:
        """Moves one message body framed by ``headers``; False if it ends at close
        (neither a length nor chunked, so only a response can have it)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                line = self.line()
                if out is not None:
                    out.sendall(line)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (trailer := self.line()) != b"\r\n":
                        if out is not None:
                            out.sendall(trailer)
                    if out is not None:
                        out.sendall(b"\r\n")
                    return True
                self.copy(size + 2, out)
        if "content-length" in headers:
            self.copy(int(headers["content-length"]), out)
            return True
        return False


def _parse(head: bytes) -> tuple[str, str, dict[str, str]]:
    """The start line's first two words and the headers (lower-case names)."""
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return first[0], first[1] if len(first) > 1 else "", headers


def _rst(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def error_document(status: int, resource: str, request_id: str) -> tuple[str, bytes]:
    """The S3 error code for ``status`` and the XML body S3 answers with."""
    code = _S3_CODES.get(status, "ServiceUnavailable")
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{_S3_MESSAGES[code]}</Message>"
        f"<Resource>{resource}</Resource><RequestId>{request_id}</RequestId></Error>"
    )
    return code, body.encode()


class S3FaultProxy:
    """A fault-injecting proxy in front of an S3 server; see the module docstring."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("http://").rstrip("/").rpartition(":")
        self.target = (host, int(port))
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._cond = threading.Condition()
        self._fault = _Fault("pass")
        self._rate: int | None = None  # bytes per second per connection (throttle)
        self._remaining: int | None = None
        self._generation = 0  # changes whenever the test sets a mode: releases held requests
        self._conns: set[_Conn] = set()
        self._closed = False
        self._started = False
        self._ids = 0
        self.requests: Counter[str] = Counter()
        self.faulted: Counter[str] = Counter()
        self.held = 0
        self.history: deque[tuple[str, str, str]] = deque(maxlen=10_000)

    # ------------------------------------------------------------------------ lifecycle

    @property
    def endpoint(self) -> str:
        """The proxy as an S3 endpoint URL (what ``AWS_ENDPOINT_URL`` takes)."""
        return f"http://127.0.0.1:{self.port}"

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` (a server's ``AWS_*`` variables) with the endpoint pointing here."""
        return {**base, "AWS_ENDPOINT_URL": self.endpoint, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def start(self) -> S3FaultProxy:
        if not self._started:
            self._started = True
            self._server.listen(128)
            threading.Thread(target=self._accept, name="s3proxy-accept", daemon=True).start()
        return self

    def close(self) -> None:
        """Stops accepting, resets every connection and releases held requests."""
        with self._cond:
            self._closed = True
            conns = list(self._conns)
            self._cond.notify_all()
        self._server.close()
        for conn in conns:
            conn.kill()

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------ modes

    def _set(self, fault: _Fault, count: int | None) -> None:
        if count is not None and count < 1:
            raise ValueError(f"count={count}: a fault applies to at least one request")
        with self._cond:
            self._fault = fault
            self._remaining = count
            self._generation += 1
            self._cond.notify_all()

    @staticmethod
    def _methods(methods: Iterable[str] | None) -> frozenset[str] | None:
        if isinstance(methods, str):
            methods = [methods]
        return None if methods is None else frozenset(m.upper() for m in methods)

    def pass_through(self) -> None:
        """Forward every request (and release the held ones to be forwarded)."""
        self._set(_Fault("pass"), None)

    def error(
        self, status: int = 503, *, methods: Iterable[str] | None = None, count: int | None = None
    ) -> None:
        """Answer matching requests with an S3 error and ``status``, without forwarding."""
        if not 400 <= status <= 599:
            raise ValueError(f"status={status}: an error status is 4xx or 5xx")
        self._set(_Fault("error", status, self._methods(methods)), count)

    def fail_next(self, n: int, status: int = 503, *, methods: Iterable[str] | None = None) -> None:
        """The next ``n`` matching requests get ``status``; then everything passes."""
        self.error(status, methods=methods, count=n)

    def reset(self, *, methods: Iterable[str] | None = None, count: int | None = None) -> None:
        """Reset (TCP RST) connections as matching requests arrive; without a filter or a
        count, also every connection open now."""
        self._set(_Fault("reset", methods=self._methods(methods)), count)
        if methods is None and count is None:
            with self._cond:
                conns = list(self._conns)
            for conn in conns:
                conn.kill()

    def stall(self, *, methods: Iterable[str] | None = None, count: int | None = None) -> None:
        """Hold matching requests unanswered until the next mode change."""
        self._set(_Fault("stall", methods=self._methods(methods)), count)

    def drop_response(
        self, *, methods: Iterable[str] | None = None, count: int | None = None
    ) -> None:
        """Forward matching requests, then reset the client instead of answering."""
        self._set(_Fault("drop", methods=self._methods(methods)), count)

    def throttle(self, bytes_per_second: int | None) -> None:
        """Forward bodies at most this fast on each connection, both ways (None: at full
        speed): a slow link, whatever the mode."""
        if bytes_per_second is not None and bytes_per_second < 1:
            raise ValueError(f"bytes_per_second={bytes_per_second}: at least 1, or None")
        self._rate = bytes_per_second

    def _pace(self, n: int) -> None:
        rate = self._rate
        if rate is not None:
            time.sleep(n / rate)

    # ------------------------------------------------------------------------ counters

    def wait_requests(self, n: int, method: str | None = None, timeout_s: float = 30.0) -> int:
        """Waits until ``n`` requests (of ``method``, or all) have been seen; the count."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (seen := self._seen(method)) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{seen} {method or 'all'} requests seen in {timeout_s} s, wanted {n}"
                    )
                self._cond.wait(left)
            return seen

    def _seen(self, method: str | None) -> int:
        return self.requests[method.upper()] if method else sum(self.requests.values())

    # ------------------------------------------------------------------------ serving

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(client)
            with self._cond:
                if self._closed:
                    _rst(client)
                    return
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _decide(self, method: str, target: str) -> tuple[_Fault, int]:
        """The fault for a request just arrived (counted), and the current generation."""
        with self._cond:
            self.requests[method] += 1
            self._ids += 1
            fault = self._fault
            if fault.kind != "pass" and fault.applies_to(method):
                self.faulted[method] += 1
                if self._remaining is not None:
                    self._remaining -= 1
                    if self._remaining == 0:
                        self._fault, self._remaining = _Fault("pass"), None
            else:
                fault = _Fault("pass")
            self.history.append((method, target, fault.kind))
            self._cond.notify_all()
            return fault, self._generation

    def _hold(self, method: str, generation: int) -> tuple[_Fault, int]:
        """Waits for a mode change; the new mode's fault for a held request (not counted)
        and the new generation."""
        with self._cond:
            self.held += 1
            try:
                while self._generation == generation and not self._closed:
                    self._cond.wait()
            finally:
                self.held -= 1
            if self._closed:
                raise _Killed
            fault = self._fault
            return (fault if fault.applies_to(method) else _Fault("pass")), self._generation

    def _serve(self, conn: _Conn) -> None:
        client = _Reader(conn, conn.client, self._pace)
        upstream: _Reader | None = None
        try:
            while True:
                head = client.head()
                if head is None:
                    return
                method, target, headers = _parse(head)
                fault, generation = self._decide(method, target)
                while fault.kind == "stall":
                    fault, generation = self._hold(method, generation)
                if fault.kind == "reset":
                    raise _Killed
                if fault.kind == "error":
                    client.body(headers, None)
                    self._answer_error(conn.client, method, target, fault.status)
                    if headers.get("connection", "").lower() == "close":
                        return
                    continue
                if upstream is None:
                    conn.upstream = socket.create_connection(self.target, timeout=None)
                    conn.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    upstream = _Reader(conn, conn.upstream, self._pace)
                conn.upstream.sendall(head)  # type: ignore[union-attr]
                client.body(headers, conn.upstream)
                keep = self._relay_response(
                    upstream, None if fault.kind == "drop" else conn.client, method
                )
                if fault.kind == "drop":
                    raise _Killed
                if not keep:
                    return
                if headers.get("connection", "").lower() == "close":
                    return
        except _Killed:
            _rst(conn.client)
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            with self._cond:
                self._conns.discard(conn)
            for s in (conn.client, conn.upstream):
                if s is not None:
                    s.close()

    def _relay_response(self, upstream: _Reader, out: socket.socket | None, method: str) -> bool:
        """One response (after any 1xx) from upstream to ``out`` (None: read and dropped);
        False if the connection cannot carry another request."""
        while True:
            head = upstream.head()
            if head is None:
                raise ConnectionError("the S3 server closed the connection without answering")
            if out is not None:
                out.sendall(head)
            _, status_text, headers = _parse(head)
            status = int(status_text)
            if 100 <= status < 200:
                continue
            break
        if method == "HEAD" or status in (204, 304):
            framed = True
        else:
            framed = upstream.body(headers, out)
            if not framed:
                upstream.copy_until_close(out)
        return framed and headers.get("connection", "").lower() != "close"

    def _answer_error(self, sock: socket.socket, method: str, target: str, status: int) -> None:
        with self._cond:
            request_id = f"sparklog-s3proxy-{self._ids}"
        code, body = error_document(status, target.split("?")[0], request_id)
        reason = "Service Unavailable" if status == 503 else code
        head = (
            f"HTTP/1.1 {status} {reason}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"x-amz-request-id: {request_id}\r\n"
            "Server: sparklog-s3proxy\r\n\r\n"
        )
        sock.sendall(head.encode() + (b"" if method == "HEAD" else body))
