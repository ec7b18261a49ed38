"""A broker's view of etcd: registration, the controller election, fenced controller writes.

Keys, under a cluster prefix (``/sparklog/<cluster>/``, one etcd may serve several):

``brokers/<node id>``
    ``{"node_id", "host", "port", "rack"}`` (JSON), put under the broker's own lease. The
    broker keeps the lease alive (a refresh every TTL/3); when it dies, is paused past the
    TTL or loses etcd, the lease expires and etcd deletes the key: the live brokers are
    exactly the keys present. A second broker registering a node id that is registered
    is refused (create-if-absent), so two processes never share an id.
``controller``
    ``{"node_id"}`` under the controller's lease, created if absent in one transaction by
    every broker that campaigns: one wins. The key's **create revision is the controller
    epoch**: etcd's revisions only grow, so a later controller always has a larger epoch.
    etcd's documentation warns that a lease alone is no mutual exclusion (a paused holder
    does not know its lease expired), so every write a controller makes is a transaction
    comparing the controller key's create revision with its epoch (``fenced``): once
    another broker won, the key was recreated with a larger revision and the old
    controller's writes fail, whatever it believes.

``producer-ids``
    the next producer id nobody has reserved (decimal). Any broker reserves a block by a
    compare-and-swap on the key's modification revision (``reserve_producer_ids``).

Who writes what: a broker writes only its own ``brokers/<id>`` key, reserves producer id
blocks by compare-and-swap, and campaigns for ``controller``; the controller (under its
epoch) writes everything else the cluster decides (partition assignments, topics:
docs/cluster.md).

The client talks to one endpoint of the list at a time and moves to the next when a call
fails to reach it; calls that fail on every endpoint raise ``CoordinationError``, and
``EtcdAccessError`` when etcd refused this client (TLS or authentication:
``sparklog.cluster.etcd``). A call refused for an expired auth token is made again once
on a new connection, which authenticates anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd

from sparklog.cluster.etcd import EtcdSettings, is_token_expired, refusal
from sparklog.errors import CoordinationError, EtcdAccessError, NodeIdTakenError

__all__ = ["CoordinationError", "EtcdAccessError", "NodeIdTakenError", "parse_endpoints"]

log = logging.getLogger(__name__)
T = TypeVar("T")
TXN_OPS = 100
#: how soon a failed watch is made again, and checked against the connection in use
WATCH_RETRY_S = 1.0


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker's registration: its primary address, and every listener's
    (``endpoints``: security protocol -> (host, port)), so a client is told the address of
    the listener it came in on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address_for(self, protocol: str) -> tuple[str, int]:
        """The (host, port) of this broker's ``protocol`` listener (its primary one if it
        has none of that protocol)."""
        for p, host, port in self.endpoints:
            if p == protocol:
                return host, port
        return self.host, self.port

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "node_id": self.node_id,
                "host": self.host,
                "port": self.port,
                "rack": self.rack,
                "endpoints": [list(e) for e in self.endpoints],
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BrokerInfo:
        d = json.loads(data)
        endpoints = tuple((str(p), str(h), int(port)) for p, h, port in d.get("endpoints", ()))
        return cls(int(d["node_id"]), str(d["host"]), int(d["port"]), d.get("rack"), endpoints)


@dataclass(frozen=True)
class Controller:
    node_id: int
    epoch: int  # the controller key's create revision


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """``[http[s]://]HOST:PORT[,...]`` -> [(host, port)]; ValueError on a malformed one."""
    return EtcdSettings(spec).addresses


class Coordination:
    """One broker's session with etcd (see the module docstring). ``etcd``: the settings,
    or just the endpoints (plain http, no authentication)."""

    def __init__(
        self,
        etcd: EtcdSettings | str,
        *,
        cluster: str = "default",
        lease_ttl_ms: int = 3000,
        timeout_s: float = 2.0,
    ) -> None:
        self.settings = etcd if isinstance(etcd, EtcdSettings) else EtcdSettings(etcd)
        self.endpoints = self.settings.addresses
        if lease_ttl_ms < 1000:
            raise ValueError(f"lease TTL {lease_ttl_ms} ms: etcd leases are whole seconds >= 1")
        self.prefix = f"/sparklog/{cluster}/".encode()
        self.ttl_s = max(1, round(lease_ttl_ms / 1000))
        self.timeout_s = timeout_s
        self._client: aetcd.Client | None = None
        self._at = 0  # index of the endpoint in use
        self._lease: Any = None
        self._keepalive: asyncio.Task[None] | None = None
        #: lease refreshes that succeeded (``/metrics``)
        self.lease_renewals = 0
        self.lease_lost = asyncio.Event()

    def key(self, *parts: object) -> bytes:
        return self.prefix + "/".join(str(p) for p in parts).encode()

    # ------------------------------------------------------------------ the connection

    async def _connect(self) -> aetcd.Client:
        if self._client is None:
            host, port = self.endpoints[self._at]
            client = self.settings.client(host, port, self.timeout_s)
            try:
                await asyncio.wait_for(client.connect(), self.timeout_s)
            except BaseException:  # a half-open channel (authentication refused) is closed
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 1.0)
                raise
            self._client = client
        return self._client

    async def _drop(self, *, next_endpoint: bool = True) -> None:
        client, self._client = self._client, None
        if next_endpoint:
            self._at = (self._at + 1) % len(self.endpoints)
        if client is not None:  # bounded: a channel to an unreachable member may not close
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 1.0)

    async def call(self, what: str, fn: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """``fn(client)`` on the endpoints in turn until one answers; EtcdAccessError at
        once if etcd refuses this client (retrying cannot cure it)."""
        last: BaseException | None = None
        reauthenticated = False
        attempts = len(self.endpoints)
        while attempts:
            attempts -= 1
            try:
                client = await self._connect()
                return await asyncio.wait_for(fn(client), self.timeout_s)
            except (TimeoutError, aetcd.exceptions.ClientError, OSError) as e:
                last = e
                if is_token_expired(e) and not reauthenticated:
                    # etcd refused the call before doing anything: the same call on a new
                    # connection, which authenticates again, is safe
                    log.info("etcd auth token expired: authenticating again")
                    reauthenticated = True
                    attempts += 1
                    await self._drop(next_endpoint=False)
                    continue
                why = refusal(e)
                if why is not None:
                    await self._drop(next_endpoint=False)
                    raise EtcdAccessError(
                        f"etcd at {self.settings.where()} refused {what}: {why} ({e})"
                    ) from None
                if "lease not found" in str(e):
                    # etcd expired this broker's lease (it was paused, cut off, or etcd
                    # lost its quorum for longer than the TTL): whatever was held under it
                    # is held no longer; the broker registers again
                    if not self.lease_lost.is_set():
                        log.warning("etcd no longer knows this broker's lease: taken as lost")
                    self.lease_lost.set()
                    break
                await self._drop()
        where = self.settings.where()
        raise CoordinationError(f"etcd at {where} did not answer {what}: {last}") from last

    async def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._keepalive
        if self._lease is not None:
            with contextlib.suppress(Exception):
                await self.call("a lease revoke", lambda c: c.revoke_lease(self._lease.id))
        await self._drop()

    # ------------------------------------------------------------------ the lease

    async def _grant(self) -> None:
        if self._keepalive is not None:  # the previous lease's: it must not flag this one
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._keepalive
        self._lease = await self.call("a lease grant", lambda c: c.lease(self.ttl_s))
        self.lease_lost.clear()
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        """Refresh the lease every TTL/3; once a refresh finds it gone (expired while this
        process was paused or cut off), or no refresh has succeeded for a TTL (etcd is out
        of reach: the lease may have expired there), set ``lease_lost`` and stop: whatever
        was held under it is held no longer. The TTL is counted from when the last good
        refresh was *sent*, which is before etcd received it, so this broker gives up no
        later than etcd expires the lease."""
        lease = self._lease
        loop = asyncio.get_running_loop()
        last_ok = loop.time()
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            sent = loop.time()
            try:
                resp = await self.call("a lease refresh", lambda c: c.refresh_lease(lease.id))
            except Exception as e:  # any failure to refresh counts towards the TTL
                log.warning("etcd lease refresh failed: %s", e)
                if loop.time() - last_ok >= self.ttl_s:
                    log.warning(
                        "etcd lease %x: no refresh for %.1f s: taken as lost",
                        lease.id,
                        loop.time() - last_ok,
                    )
                    self.lease_lost.set()
                    return
                continue
            if getattr(resp, "TTL", 1) <= 0:
                log.warning("etcd lease %x expired", lease.id)
                self.lease_lost.set()
                return
            last_ok = sent
            self.lease_renewals += 1

    @property
    def lease_id(self) -> int:
        if self._lease is None:
            raise CoordinationError("not registered")
        return int(self._lease.id)

    # ------------------------------------------------------------------ brokers

    async def register(self, me: BrokerInfo) -> None:
        """Create ``brokers/<id>`` under a new lease; CoordinationError if the id is
        registered by a live broker."""
        if not 0 < me.port < 65536 or not me.host or me.host in ("0.0.0.0", "::"):
            raise CoordinationError(
                f"broker {me.node_id} would advertise {me.host}:{me.port}: clients need a "
                "host they can reach and a port (set --advertise)"
            )
        await self._grant()
        key = self.key("brokers", me.node_id)

        async def txn(c: aetcd.Client) -> Any:
            return await c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, me.to_json(), lease=self._lease)],
                failure=[c.transactions.get(key)],
            )

        ok, resp = await self.call("a broker registration", txn)
        if not ok:
            held = resp[0][0][0]
            with contextlib.suppress(Exception):  # the lease granted for nothing
                await self.call("a lease revoke", lambda c: c.revoke_lease(self._lease.id))
            if self._keepalive is not None:
                self._keepalive.cancel()
            raise NodeIdTakenError(
                f"node id {me.node_id} is registered by a live broker "
                f"({BrokerInfo.from_json(held).host}:{BrokerInfo.from_json(held).port}); "
                "each broker needs its own --node-id"
            )

    async def brokers(self) -> list[BrokerInfo]:
        """The live brokers, by node id."""
        prefix = self.key("brokers", "")
        found = await self.call("a broker listing", lambda c: c.get_prefix(prefix))
        return sorted((BrokerInfo.from_json(kv.value) for kv in found), key=lambda b: b.node_id)

    # ------------------------------------------------------------------ the controller

    async def campaign(self, node_id: int) -> Controller:
        """Try to become controller; returns who is (this broker or another)."""
        key = self.key("controller")
        body = json.dumps({"node_id": node_id}).encode()

        async def txn(c: aetcd.Client) -> Any:
            return await c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[
                    c.transactions.put(key, body, lease=self._lease),
                    c.transactions.get(key),
                ],
                failure=[c.transactions.get(key)],
            )

        _ok, resp = await self.call("a controller election", txn)
        kv = resp[-1][0][1]  # a get's response: [(value, key metadata)]
        return Controller(int(json.loads(kv.value)["node_id"]), int(kv.create_revision))

    async def controller(self) -> Controller | None:
        kv = await self.call("a controller lookup", lambda c: c.get(self.key("controller")))
        if kv is None:
            return None
        return Controller(int(json.loads(kv.value)["node_id"]), int(kv.create_revision))

    async def fenced(self, epoch: int, puts: dict[bytes, bytes]) -> bool:
        """Put ``puts`` in one transaction if the controller epoch is still ``epoch``;
        False (nothing written) if another controller was elected meanwhile."""
        key = self.key("controller")

        async def txn(c: aetcd.Client) -> Any:
            return await c.transaction(
                compare=[c.transactions.create(key) == epoch],
                success=[c.transactions.put(k, v) for k, v in puts.items()],
                failure=[],
            )

        ok, _ = await self.call("a fenced controller write", txn)
        return bool(ok)

    async def fenced_all(self, epoch: int, puts: dict[bytes, bytes]) -> bool:
        """``fenced`` in transactions of at most ``TXN_OPS`` puts (etcd's default limit is
        128 operations per transaction). Each is fenced on its own: after a refusal the
        rest is not tried, and what was written before was written by the controller of
        ``epoch`` while it was controller."""
        items = list(puts.items())
        for at in range(0, len(items), TXN_OPS):
            if not await self.fenced(epoch, dict(items[at : at + TXN_OPS])):
                return False
        return True

    async def reserve_producer_ids(self, size: int, *, at_least: int = 0) -> int:
        """Reserve the next ``size`` producer ids cluster-wide; returns the first. The key
        ``producer-ids`` holds the next free id; a compare-and-swap on its modification
        revision makes two brokers reserving at once get disjoint blocks (the loser
        re-reads and tries again). ``at_least``: never below this (a data dir's own
        ``producer-ids.json`` from its embedded days), so ids are never reused."""
        if size < 1:
            raise ValueError(f"producer id block size {size} must be >= 1")
        key = self.key("producer-ids")
        for _ in range(100):
            kv = await self.call("a producer id read", lambda c: c.get(key))
            start = max(int(kv.value) if kv is not None else 0, at_least)
            rev = kv.mod_revision if kv is not None else 0
            nxt = str(start + size).encode()

            async def txn(c: aetcd.Client, rev: int = rev, nxt: bytes = nxt) -> Any:
                cmp = (c.transactions.mod(key) == rev) if rev else (c.transactions.create(key) == 0)
                return await c.transaction(
                    compare=[cmp], success=[c.transactions.put(key, nxt)], failure=[]
                )

            ok, _ = await self.call("a producer id reservation", txn)
            if ok:
                return start
        raise CoordinationError("could not reserve producer ids: 100 lost races in a row")

    async def get_many(self, keys: list[bytes]) -> dict[bytes, bytes | None]:
        """The values of ``keys``, each group of ``TXN_OPS`` read in one linearizable
        transaction (one round trip however many partitions a group-commit round holds)."""
        out: dict[bytes, bytes | None] = {}
        for at in range(0, len(keys), TXN_OPS):
            chunk = keys[at : at + TXN_OPS]

            async def txn(c: aetcd.Client, chunk: list[bytes] = chunk) -> Any:
                return await c.transaction(
                    compare=[], success=[c.transactions.get(k) for k in chunk], failure=[]
                )

            _ok, resp = await self.call("a leader epoch check", txn)
            for key, got in zip(chunk, resp, strict=True):
                out[key] = bytes(got[0][0]) if got else None
        return out

    async def get_prefix(self, prefix: bytes) -> dict[bytes, bytes]:
        found = await self.call("a prefix read", lambda c: c.get_prefix(prefix))
        return {bytes(kv.key): bytes(kv.value) for kv in found}

    async def get(self, key: bytes) -> bytes | None:
        kv = await self.call("a read", lambda c: c.get(key))
        return None if kv is None else bytes(kv.value)

    # ------------------------------------------------------------------ watches

    async def watch(
        self, names: tuple[str, ...], changed: Callable[[], None], stop: asyncio.Event
    ) -> None:
        """Call ``changed()`` whenever a key under one of ``names`` (key prefixes below the
        cluster's: ``brokers/``, ``controller``, ``partitions/``) changes, and once each
        time the watch is (re)made, until ``stop`` is set.

        Only a hint that makes a poll come sooner: whoever is woken reads etcd as it would
        at its next interval, so an event missed, a watch on a member that hangs, or one
        that failed (made again after ``WATCH_RETRY_S``) costs at most one interval. The
        watch follows the connection ``call`` uses: when a call moved to another
        endpoint, the watch is made again there."""
        while not stop.is_set():
            watches: list[Any] = []
            try:
                client = await self._connect()
                for name in names:
                    watches.append(
                        await asyncio.wait_for(client.watch_prefix(self.key(name)), self.timeout_s)
                    )
                changed()  # whatever changed before the watch began
                await self._forward(client, watches, changed, stop)
            except Exception as e:  # a broken stream, an unreachable member
                log.debug("etcd watch: %s", e)
            finally:
                for w in watches:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(w.cancel(), 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), WATCH_RETRY_S)

    async def _forward(
        self, client: Any, watches: list[Any], changed: Callable[[], None], stop: asyncio.Event
    ) -> None:
        """Call ``changed`` at each event of ``watches`` until one ends, ``stop`` is set,
        or ``client`` is no longer the connection in use."""

        async def each(w: Any) -> None:
            async for _event in w:
                changed()

        tasks = [asyncio.ensure_future(each(w)) for w in watches]
        stopped = asyncio.ensure_future(stop.wait())  # a stop ends the wait at once
        try:
            while not stop.is_set() and self._client is client:
                done, _ = await asyncio.wait(
                    [*tasks, stopped], timeout=WATCH_RETRY_S, return_when=asyncio.FIRST_COMPLETED
                )
                for t in done:
                    t.result()  # a watch that failed: raise, to be made again
                if done:
                    return
        finally:
            for t in (*tasks, stopped):
                t.cancel()
            await asyncio.gather(*tasks, stopped, return_exceptions=True)
