"""The broker process: an asyncio TCP server speaking the Kafka protocol over storage.

A connection's requests are read ahead and processed as they arrive, up to
``max_inflight_requests`` at a time; responses go back strictly in request order (Kafka's
contract with clients that pipeline). A frame whose declared size is negative
or above ``socket_request_max_bytes`` closes the connection before its body is read; so do
unknown API keys, unsupported versions (ApiVersions excepted: it gets Kafka's v0
UNSUPPORTED_VERSION answer with the supported list) and unparsable requests. None of these
affects other connections. Memory per connection is bounded by ``max_inflight_requests``
frames.

Start-up takes the data-dir lock (a second broker on the same directory refuses to start),
and every partition a broker opens starts a new leader epoch. SIGTERM/SIGINT stop it
cleanly: the listener closes, in-flight requests finish, every log is synced and closed.

Maintenance: every ``manifest_refresh_ms`` the open partitions pick up manifest versions
that retention and compaction jobs committed (the jobs never call the broker: fetch and
ListOffsets then serve the new segment set and log start offset), and every
``gc_interval_ms`` files no manifest needs are deleted once ``file.delete.delay.ms`` has
passed, so readers holding the old files finish first. Both run on one worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import resource
import signal
import struct
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker import wire
from sparklog.broker.apis import APIS
from sparklog.broker.config import BrokerConfig
from sparklog.broker.groups import GroupCoordinator
from sparklog.broker.handlers import RequestContext
from sparklog.broker.offsets import OffsetStore
from sparklog.broker.partitions import PartitionManager
from sparklog.errors import CorruptMetadataError
from sparklog.storage import Storage
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.lock import DataDirLock

log = logging.getLogger("sparklog.broker")
CLUSTER_FILE = "cluster.json"


def _cluster_id(storage: Storage) -> str:
    path = storage.fs.join(storage.root, CLUSTER_FILE)
    storage.fs.makedirs(storage.root)
    new = json.dumps({"cluster_id": uuid.uuid4().hex[:22]}).encode()
    storage.fs.create_exclusive(path, new)
    try:
        return str(json.loads(storage.fs.read_bytes(path))["cluster_id"])
    except (ValueError, KeyError) as e:
        raise CorruptMetadataError(f"{path}: unreadable: {e}") from e


class Broker:
    """One broker process. ``await start()``, then ``await stop()`` (or ``run()``)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.storage = Storage(config.data_dir)
        self._lock: DataDirLock | None = None
        self.manager: PartitionManager | None = None
        self.coordinator: GroupCoordinator | None = None
        self.offsets: OffsetStore | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        self.host = ""
        self.cluster_id = ""
        self._maintenance: asyncio.Task[None] | None = None
        self._maintenance_step: asyncio.Future[None] | None = None
        self._maintenance_pool = ThreadPoolExecutor(1, thread_name_prefix="sparklog-maintain")

    async def start(self) -> None:
        if isinstance(self.storage.fs, LocalFileSystem):
            self._lock = DataDirLock(self.storage.root).acquire()
        try:
            self.cluster_id = _cluster_id(self.storage)
            self.manager = PartitionManager(self.config, self.storage)
            self.offsets = OffsetStore(self.manager)
            self.offsets.load()
            self.coordinator = GroupCoordinator(
                initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=self.config.group_min_session_timeout_ms,
                max_session_timeout_ms=self.config.group_max_session_timeout_ms,
            )
            self.coordinator.start()
            host, port = self.config.host_port
            self._server = await asyncio.start_server(self._serve, host, port, backlog=256)
            sock = self._server.sockets[0].getsockname()
            self.host, self.port = self.config.advertised_host or sock[0], int(sock[1])
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain())
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        log.info(
            "sparklog broker %d listening on %s:%d (data dir %s)",
            self.config.node_id,
            sock[0],
            self.port,
            self.storage.root,
        )

    async def _maintain(self) -> None:
        """Refresh manifests and collect garbage periodically (see the module docstring)."""
        assert self.manager is not None
        loop = asyncio.get_running_loop()
        next_gc = time.monotonic() + self.config.gc_interval_ms / 1000
        while True:
            await asyncio.sleep(self.config.manifest_refresh_ms / 1000)
            gc_now = time.monotonic() >= next_gc
            if gc_now:
                next_gc = time.monotonic() + self.config.gc_interval_ms / 1000
            handles = list(self.manager.handles.values())
            self._maintenance_step = loop.run_in_executor(
                self._maintenance_pool,
                functools.partial(self.manager.maintain, handles, collect_garbage=gc_now),
            )
            await asyncio.shield(self._maintenance_step)

    async def stop(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._maintenance
        if self._maintenance_step is not None:  # a step on the worker thread finishes first
            with contextlib.suppress(Exception):
                await self._maintenance_step
        self._maintenance_pool.shutdown(wait=True)
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self.coordinator is not None:
            await self.coordinator.stop()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self.manager is not None:
            self.manager.close()
        if self._lock is not None:
            self._lock.release()
        log.info("sparklog broker %d stopped (%s:%d)", self.config.node_id, self.host, self.port)

    def _context(self, version: int, peer_host: str = "") -> RequestContext:
        assert self.manager is not None
        return RequestContext(
            self.manager,
            version,
            self.config.node_id,
            self.host,
            self.port,
            self.cluster_id,
            coordinator=self.coordinator,
            offsets=self.offsets,
            peer_host=peer_host,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.config.max_connections:
            log.warning("refusing a connection: %d open", len(self._connections))
            writer.close()
            return
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        peer_host = str(peer[0]) if peer else ""
        # Requests are read ahead and processed as they arrive (up to max_inflight_requests
        # per connection: a client pipelining produce requests need not wait for each
        # fsync); responses are written strictly in request order by the responder. Each
        # handler runs up to its first await before the next one starts, so appends happen
        # in request order too, which idempotent producers rely on.
        inflight: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(
            self.config.max_inflight_requests
        )

        async def respond() -> None:
            while True:
                item = await inflight.get()
                if item is None:
                    return
                response = await item
                if response is not None:
                    writer.write(response)
                    await writer.drain()

        responder = asyncio.get_running_loop().create_task(respond())
        pending: list[asyncio.Task[bytes | None]] = []
        try:
            while not responder.done():
                try:
                    head = await _race(reader.readexactly(4), responder)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        raise
                    break  # the client finished sending: answer what it sent, then close
                if head is None:
                    break
                (size,) = struct.unpack(">i", head)
                if size < 8 or size > self.config.socket_request_max_bytes:
                    log.warning(
                        "closing %s: request of %d bytes (limit %d)",
                        peer, size, self.config.socket_request_max_bytes,
                    )  # fmt: skip
                    break
                frame = await _race(reader.readexactly(size), responder)
                if frame is None:
                    break
                work = asyncio.get_running_loop().create_task(self.handle_frame(frame, peer_host))
                pending = [t for t in pending if not t.done()]
                pending.append(work)
                if await _race(inflight.put(work), responder) is None and responder.done():
                    break
            if not responder.done():
                await inflight.put(None)
                await responder
            else:
                responder.result()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except wire.FrameError as e:
            log.warning("closing %s: %s", peer, e)
        except Exception:
            log.exception("closing %s after an unexpected error", peer)
        finally:
            responder.cancel()
            for t in pending:
                t.cancel()
            self._connections.discard(task)
            writer.close()

    async def handle_frame(self, frame: bytes, peer_host: str = "") -> bytes | None:
        """The response frame for one request frame (None: send nothing)."""
        head = wire.peek_head(frame)
        api = APIS.get(head.api_key)
        if api is None:
            raise wire.FrameError(f"unknown API key {head.api_key}")
        if not api.min_version <= head.api_version <= api.max_version:
            if head.api_key == wire.API_VERSIONS_KEY:
                body = await api.handler(self._context(0), None, None)
                assert body is not None
                body["error_code"] = ErrorCode.unsupported_version
                cls = wire.response_class(head.api_key, 0)
                return wire.encode_response(
                    head.api_key, 0, head.correlation_id, wire.build(cls, body)
                )
            raise wire.FrameError(
                f"{api.name} v{head.api_version} is not supported "
                f"(v{api.min_version}-v{api.max_version})"
            )
        header, request = wire.parse_request(frame)
        result = await api.handler(self._context(head.api_version, peer_host), header, request)
        if result is None:
            return None
        cls = wire.response_class(head.api_key, head.api_version)
        return wire.encode_response(
            head.api_key, head.api_version, head.correlation_id, wire.build(cls, result)
        )


async def _race(step: Any, responder: asyncio.Task[None]) -> Any:
    """Await ``step`` unless the responder finishes first (then None; ``step`` cancelled)."""
    work = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({work, responder}, return_when=asyncio.FIRST_COMPLETED)
    if work in done:
        return work.result()
    work.cancel()
    return None


def _raise_fd_limit() -> None:
    """Each open partition holds a few files: allow as many as the hard limit permits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _run(config: BrokerConfig, ready: Any = None) -> None:
    # handlers first: a SIGTERM that arrives while starting still stops the broker cleanly
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    _raise_fd_limit()
    broker = Broker(config)
    await broker.start()
    if ready is not None:
        ready(broker)
    try:
        await stop.wait()
    finally:
        await broker.stop()


def run(config: BrokerConfig) -> None:
    """Run a broker in the foreground until SIGTERM or SIGINT."""
    # Decoding a 1 MB produce batch creates ~8k short-lived record objects; with the default
    # generation-0 threshold (700) the cyclic collector ran ~11 times per batch and took a
    # third of the event loop (py-spy). Nothing on the hot path builds cycles, so collect
    # rarely, and move start-up objects out of the collector's way.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    asyncio.run(_run(config))
