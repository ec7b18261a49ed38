"""The broker process: an asyncio TCP server speaking the Kafka protocol over storage.

Each accepted socket becomes a ``Connection`` (``sparklog.broker.connection``: the request
loop, framing limits, in-order responses); ``Broker.dispatch`` turns one request frame into
its response. Unknown API keys, unsupported versions (ApiVersions excepted: it gets Kafka's
v0 UNSUPPORTED_VERSION answer with the supported list) and unparsable requests close that
connection; none of these affects other connections.

Start-up binds the listeners first (a port that is taken leaves nothing behind), then
takes the broker's lease on its data dir (embedded mode: the local lease backend, so a
second broker on the same directory refuses to start) and claims the root's owner record
(``sparklog.storage.owner``: an embedded broker refuses a cluster's root, a cluster broker
an embedded broker's or another cluster's), and every partition a broker opens starts a
new leader epoch. In cluster mode (``etcd`` set) there is no data-dir lease: brokers share
the directory, and a broker writes only the partitions the controller assigned it, at
their epochs (``sparklog.broker.membership``, docs/cluster.md). A broker that learns of
another writer (a changed owner record, a leader epoch it did not commit: see
``sparklog.storage.epochs``) stops acknowledging writes (``PartitionManager.stop_writes``).
Each listener of ``listen`` is its own server socket (TLS on SSL and SASL_SSL); a
connection remembers the listener it came in on, and that listener's address is the one
the broker advertises to it. On SASL listeners a connection may send only ApiVersions,
SaslHandshake and SaslAuthenticate until it has authenticated (anything else closes it,
as in Kafka), and with ``connections_max_reauth_ms`` a session that expired may send
nothing else until it re-authenticates. With ``[security] authorizer`` every handler asks
``RequestContext.allowed`` (docs/security.md).
SIGTERM/SIGINT stop it cleanly: the listener closes, in-flight requests finish, every log
is synced and closed.

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
import socket
import ssl
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from sparklog.broker import object_storage
from sparklog.broker.apis import APIS, api_versions
from sparklog.broker.append import AppendService
from sparklog.broker.config import BrokerConfig
from sparklog.broker.connection import Connection
from sparklog.broker.context import BrokerServices, RequestContext
from sparklog.broker.coordinators.group_offsets import OFFSETS_TOPIC, OffsetStore
from sparklog.broker.coordinators.groups import GroupCoordinator
from sparklog.broker.coordinators.transactions import TXN_TOPIC, TransactionCoordinator
from sparklog.broker.errors import error_code
from sparklog.broker.membership import ClusterMember
from sparklog.broker.observability.collector import BrokerCollector, MetricsSources
from sparklog.broker.observability.lag import LagMonitor
from sparklog.broker.observability.metrics import BrokerMetrics, MetricsServer
from sparklog.broker.partitions import PartitionManager
from sparklog.broker.schema_registry.rest import RegistryApi
from sparklog.broker.schema_registry.service import REGISTRY_ENDPOINT, SchemaRegistryService
from sparklog.cluster.coordination import BrokerInfo
from sparklog.cluster.etcd import EtcdSettings
from sparklog.errors import CorruptMetadataError, FrameError, UnsupportedVersionError
from sparklog.kafka import wire
from sparklog.kafka.address import Listener
from sparklog.kafka.client import ClientSettings
from sparklog.security.service import SecurityService
from sparklog.security.tls import certificate_principal, server_context
from sparklog.storage import Storage, names, owner
from sparklog.storage.lease import DATA_DIR, Lease
from sparklog.storage.owner import Owner
from sparklog.storage.tail import BrokerTail

log = logging.getLogger("sparklog.broker")


def _cluster_id(storage: Storage) -> str:
    path = storage.fs.join(storage.root, names.CLUSTER_FILE)
    storage.fs.makedirs(storage.root)
    new = json.dumps({"cluster_id": uuid.uuid4().hex[:22]}).encode()
    storage.fs.create_exclusive(path, new)
    try:
        return str(json.loads(storage.fs.read_bytes(path))["cluster_id"])
    except (ValueError, KeyError) as e:
        raise CorruptMetadataError(f"{path}: unreadable: {e}") from e


class Broker:
    """One broker process. ``await start()``, then ``await stop()`` (or ``run()``)."""

    def __init__(self, config: BrokerConfig, *, ack_fence: bool = True) -> None:
        """``ack_fence=False`` is for measurement only (``bench/cluster.py``, through
        ``bench/_unfenced_broker.py``, measures what the fence costs): in cluster mode the
        broker then acknowledges writes without confirming its leader epoch in etcd, so a
        zombie could acknowledge writes its successor never holds. No setting turns it off."""
        self.config = config
        self._ack_fence = ack_fence
        if not ack_fence and config.etcd:
            log.warning(
                "ack fence off: acknowledgements are not fenced by the leader epoch "
                "(for measurement only)"
            )
        #: how to reach etcd (cluster mode), read now: a missing password file or TLS file
        #: stops the broker before it touches its data dir
        self.etcd = (
            None
            if not config.etcd
            else EtcdSettings.from_options(
                config.etcd,
                ca_file=config.etcd_ca_file,
                cert_file=config.etcd_cert_file,
                key_file=config.etcd_key_file,
                user=config.etcd_user,
                password_file=config.etcd_password_file,
            )
        )
        self.storage = Storage(config.data_dir)
        #: on object storage: the broker's tail (``sparklog.broker.object_storage``)
        self.tail: BrokerTail | None = None
        self._lease: Lease | None = None
        #: the root's owner record as this broker claimed it (``sparklog.storage.owner``)
        self.owner: Owner | None = None
        self.member: ClusterMember | None = None
        self.manager: PartitionManager | None = None
        self.services: BrokerServices | None = None
        self._servers: list[asyncio.Server] = []
        #: protocol -> the advertised (host, port) of that listener
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.security: SecurityService | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0
        self.host = ""
        self.cluster_id = ""
        self._maintenance: asyncio.Task[None] | None = None
        self._maintenance_step: asyncio.Future[None] | None = None
        self._maintenance_pool = ThreadPoolExecutor(1, thread_name_prefix="sparklog-maintain")
        self.transactions: TransactionCoordinator | None = None
        self.registry: SchemaRegistryService | None = None
        self._registry_runner: web.AppRunner | None = None
        self.metrics: BrokerMetrics | None = None
        self._collector: BrokerCollector | None = None
        self._metrics_server: MetricsServer | None = None

    async def _next_producer_id(self) -> int:
        if self.member is not None:
            return await self.member.next_producer_id()
        assert self.manager is not None
        return self.manager.producer_ids.next_id()

    async def _remote_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> None:
        """Cluster mode: send one marker to the partition's leader (WriteTxnMarkers)."""
        assert self.member is not None
        await self.member.write_remote_marker(
            topic, partition, producer_id, epoch, commit, coordinator_epoch
        )

    async def start(self) -> None:
        clustered = self.config.clustered
        try:
            await self._listen()  # bound, not serving yet: a taken port creates nothing
            self._claim_root()
            self.cluster_id = _cluster_id(self.storage)
            self.manager = PartitionManager(self.config, self.storage, cluster=clustered)
            if not self.storage.fs.supports_append:  # the log on object storage
                self.tail = object_storage.attach(self.manager, self.config, self.etcd)
            offsets = OffsetStore(self.manager)
            if clustered:
                offsets.ensure_topic()  # its partitions load as this broker takes them over
            else:
                offsets.load()
            coordinator = GroupCoordinator(
                initial_rebalance_delay_ms=self.config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=self.config.group_min_session_timeout_ms,
                max_session_timeout_ms=self.config.group_max_session_timeout_ms,
            )
            coordinator.start()
            transactions = TransactionCoordinator(
                self.manager,
                offsets,
                next_producer_id=self._next_producer_id,
                max_timeout_ms=self.config.transaction_max_timeout_ms,
                abort_check_ms=self.config.transaction_abort_check_ms,
                remote_marker=self._remote_marker if clustered else None,
            )
            self.transactions = transactions
            if clustered:
                transactions.ensure_topic()
                self.member = self._member(offsets)
            else:
                transactions.load()
            transactions.start()
            self.security = SecurityService(self.config.security, self.storage)
            self.registry = SchemaRegistryService(self.manager, self.config.node_id, self.member)
            if self.config.metrics is not None:
                self.metrics = BrokerMetrics()
            appends = AppendService(self.manager, transactions, self.registry, self.metrics)
            self.services = BrokerServices(
                self.config.node_id,
                self.cluster_id,
                self.manager,
                coordinator,
                offsets,
                transactions,
                appends,
                self.member,
                self.security,
                self.registry,
                self.metrics,
            )
            for server in self._servers:
                await server.start_serving()
            registered = dict(self.endpoints)
            if self.config.schema_registry is not None:
                registered[REGISTRY_ENDPOINT] = await self._serve_registry()
            if self.metrics is not None:
                await self._serve_metrics()
            if self.member is not None:
                await self.member.start(self.host, self.port, registered)
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain())
        except BaseException:
            for server in self._servers:
                server.close()
            if self.member is not None:
                with contextlib.suppress(Exception):
                    await self.member.stop()
            if self._lease is not None:
                self._lease.release()
            raise
        log.info(
            "sparklog broker %d listening on %s (data dir %s)",
            self.config.node_id,
            ", ".join(f"{p}://{h}:{port}" for p, (h, port) in self.endpoints.items()),
            self.storage.root,
        )

    def _claim_root(self) -> None:
        """The data-dir lease (embedded mode; in a cluster, etcd and leader epochs say who
        writes what) and the root's owner record (module docstring)."""
        fs, root, uri = self.storage.fs, self.storage.root, self.storage.uri
        owner.check_root(fs, root, uri)
        if self.config.clustered:
            object_storage.check_atomic_create(fs, root, uri)
            wanted = Owner.of_cluster(self.config.cluster_name, str(self.config.etcd))
        else:
            self._lease = self.storage.leases.acquire(DATA_DIR, self._holder())
            wanted = Owner.embedded()
        self.owner = owner.claim(fs, root, wanted, uri=uri)

    async def _listen(self) -> None:
        """One server socket per listener, bound but not serving until ``start`` has the
        broker ready; the first is the primary (``host``/``port``)."""
        tls = None
        for listener in self.config.listeners:
            if listener.tls and tls is None:
                tls = server_context(self.config.security)
            server = await asyncio.start_server(
                functools.partial(self._accept, listener),
                listener.host,
                listener.port,
                backlog=256,
                ssl=tls if listener.tls else None,
                ssl_handshake_timeout=10 if listener.tls else None,
                start_serving=False,
            )
            self._servers.append(server)
            sock = server.sockets[0].getsockname()
            host = self.config.advertised_host or sock[0]
            self.endpoints[listener.security_protocol] = (host, int(sock[1]))
        self.host, self.port = next(iter(self.endpoints.values()))

    async def _serve_registry(self) -> tuple[str, int]:
        """Start the Schema Registry's REST API (``schema_registry``); its address."""
        assert self.registry is not None
        scheme, host, port = self.config.registry_address
        self.registry.ensure_topic()
        if self.member is None:
            self.registry.refresh()
        sec = self.config.security
        tls = server_context(sec) if scheme == "https" else None
        client_tls = ssl.create_default_context(cafile=sec.ssl_cafile) if tls else None
        api = RegistryApi(
            self.registry,
            security=self.security,
            auth=self.config.schema_registry_auth,
            scheme=scheme,
            client_ssl=client_tls,
        )
        self._registry_runner = web.AppRunner(api.app(), access_log=None)
        await self._registry_runner.setup()
        site = web.TCPSite(self._registry_runner, host, port, ssl_context=tls, backlog=256)
        await site.start()
        sock = self._registry_runner.addresses[0]
        advertised = self.config.advertised_host or sock[0]
        self.registry.url = f"{scheme}://{advertised}:{int(sock[1])}"
        log.info("schema registry serving at %s", self.registry.url)
        return advertised, int(sock[1])

    async def _serve_metrics(self) -> None:
        """Start ``/metrics`` (``metrics``): the collector computes, at each scrape, what
        is not counted on the hot paths (``sparklog.broker.observability.metrics``)."""
        assert self.metrics is not None and self.services is not None
        cfg = self.config
        monitor = LagMonitor(cfg.lag_window, cfg.lag_sample_ms / 1000)
        s = self.services
        sources = MetricsSources(s.node_id, s.manager, s.coordinator, s.offsets, s.cluster)
        self._collector = BrokerCollector(sources, monitor, f"{self.host}:{self.port}")
        self.metrics.registry.register(self._collector)
        self._metrics_server = MetricsServer(self.metrics)
        host, port = await self._metrics_server.start(*cfg.metrics_address)
        advertised = cfg.advertised_host or host
        if advertised in ("0.0.0.0", "::", ""):  # bound to every address: name this host
            advertised = socket.getfqdn()
        if ":" in advertised:
            advertised = f"[{advertised}]"
        self.metrics.url = f"http://{advertised}:{port}/metrics"
        log.info("metrics serving at %s", self.metrics.url)

    def _member(self, offsets: OffsetStore) -> ClusterMember:
        assert self.manager is not None and self.etcd is not None

        def gained(topic: str, partition: int) -> None:
            if topic == OFFSETS_TOPIC:
                offsets.load_partition(partition)
            elif topic == TXN_TOPIC and self.transactions is not None:
                self.transactions.load_partition(partition)

        def lost(topic: str, partition: int) -> None:
            if topic == OFFSETS_TOPIC:
                offsets.drop_partition(partition)
            elif topic == TXN_TOPIC and self.transactions is not None:
                self.transactions.drop_partition(partition)

        return ClusterMember(
            self.manager,
            etcd=self.etcd,
            cluster=self.config.cluster_name,
            lease_ttl_ms=self.config.lease_ttl_ms,
            node_id=self.config.node_id,
            rack=self.config.rack,
            on_gained=gained,
            on_lost=lost,
            ack_fence=self._ack_fence,
            peer_settings=self._peer_settings,
        )

    def _peer_settings(self, peer: BrokerInfo) -> ClientSettings:
        """How this broker calls ``peer`` (WriteTxnMarkers): on the inter-broker listener
        (``[security] inter_broker_listener``, default the primary listener's protocol), as
        ``inter_broker_username`` over SASL, presenting its own certificate over TLS (mTLS:
        its principal is its certificate's CN) and trusting ``ssl_cafile``."""
        sec = self.config.security
        protocol = (sec.inter_broker_listener or self.config.listener.security_protocol).upper()
        host, port = peer.address_for(protocol)
        sasl, tls = protocol.startswith("SASL_"), protocol in ("SSL", "SASL_SSL")
        return ClientSettings(
            f"{host}:{port}",
            10.0,
            f"sparklog-broker-{self.config.node_id}",
            security_protocol=protocol,
            sasl_mechanism=sec.sasl_mechanisms[0] if sasl and sec.sasl_mechanisms else "PLAIN",
            sasl_username=sec.inter_broker_username if sasl else None,
            sasl_password=sec.inter_broker_password if sasl else None,
            ssl_cafile=sec.ssl_cafile if tls else None,
            ssl_certfile=sec.ssl_certfile if tls else None,
            ssl_keyfile=sec.ssl_keyfile if tls else None,
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
                functools.partial(self._maintain_step, handles, gc_now),
            )
            await asyncio.shield(self._maintenance_step)

    def _maintain_step(self, handles: list[Any], collect_garbage: bool) -> None:
        assert self.manager is not None
        if self.owner is not None and self.manager.foreign is None:
            st = self.storage
            try:
                changed = owner.verify(st.fs, st.root, self.owner, uri=st.uri)
            except OSError:  # unreadable for now: read again at the next step
                log.exception("cannot read the owner record of %s", st.uri)
                changed = None
            if changed is not None:
                self.manager.stop_writes(changed)
        if self.security is not None:
            try:
                self.security.refresh()
            except Exception:
                log.exception("cannot refresh users and ACLs; keeping the last ones read")
        self.manager.maintain(handles, collect_garbage=collect_garbage)
        member, tail = self.member, self.tail
        if collect_garbage and tail and member and member.role.is_controller:
            try:  # one broker, the controller, sweeps the cluster's round objects
                object_storage.collect_rounds(tail, self.storage, self.config)
            except Exception:
                log.exception("cannot collect round objects")
        if self._collector is not None:
            try:
                self._collector.sample_lag()
            except Exception:
                log.exception("cannot sample consumer lag")

    async def stop(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._maintenance
        if self._maintenance_step is not None:  # a step on the worker thread finishes first
            with contextlib.suppress(Exception):
                await self._maintenance_step
        self._maintenance_pool.shutdown(wait=True)
        if self.member is not None:
            # Kafka's controlled shutdown: give every partition up and leave etcd first,
            # while still answering (NOT_LEADER_OR_FOLLOWER sends clients to the new
            # leaders), so the controller moves them at once rather than after a lease TTL
            await self.member.stop()
        if self._metrics_server is not None:
            with contextlib.suppress(Exception):
                await self._metrics_server.stop()
        if self._registry_runner is not None:
            with contextlib.suppress(Exception):
                await self._registry_runner.cleanup()
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self.services is not None:
            await self.services.coordinator.stop()
            await self.services.transactions.stop()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self.manager is not None:
            self.manager.close()
        if self.tail is not None:
            self.tail.close()
        if self._lease is not None:
            self._lease.release()
        log.info("sparklog broker %d stopped (%s:%d)", self.config.node_id, self.host, self.port)

    def _holder(self) -> str:
        return f"broker {self.config.node_id}"

    async def _accept(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.config.max_connections:
            log.warning("refusing a connection: %d open", len(self._connections))
            writer.close()
            return
        self._connections.add(task)
        host, port = self.endpoints[listener.security_protocol]
        conn = Connection(
            reader,
            writer,
            advertised_host=host,
            advertised_port=port,
            max_request_bytes=self.config.socket_request_max_bytes,
            max_inflight=self.config.inflight_requests(self.tail is not None),
            max_inflight_bytes=self.config.max_inflight_bytes,
            listener=listener,
            sasl_max_receive_bytes=self.config.security.sasl_max_receive_bytes,
            principal=certificate_principal(writer.get_extra_info("peercert"))
            if listener.tls
            else None,
        )
        try:
            await conn.serve(self.dispatch)
        finally:
            self._connections.discard(task)

    async def dispatch(self, conn: Connection, frame: bytes) -> bytes | None:
        """The response frame for one request frame (None: send nothing)."""
        assert self.services is not None
        head = wire.peek_head(frame)
        api = APIS.get(head.api_key)
        if api is None:
            raise FrameError(f"unknown API key {head.api_key}")
        if not api.min_version <= head.api_version <= api.max_version:
            if head.api_key == wire.API_VERSIONS_KEY:
                refused = UnsupportedVersionError(
                    f"ApiVersions v{head.api_version} is not supported "
                    f"(v{api.min_version}-v{api.max_version})"
                )
                body = api_versions(error_code(refused))
                cls = wire.response_class(head.api_key, 0)
                return wire.encode_response(
                    head.api_key, 0, head.correlation_id, wire.build(cls, body)
                )
            raise FrameError(
                f"{api.name} v{head.api_version} is not supported "
                f"(v{api.min_version}-v{api.max_version})"
            )
        if head.api_key not in _BEFORE_AUTH and not _authenticated(conn):
            raise FrameError(
                f"{api.name} before SASL authentication"
                if not conn.authenticated
                else f"{api.name} after the SASL session expired (re-authenticate)"
            )
        began = time.perf_counter()
        header, request = wire.parse_request(frame)
        ctx = RequestContext(self.services, conn, head.api_version)
        result = await api.handler(ctx, header, request)
        response = None
        if result is not None:
            cls = wire.response_class(head.api_key, head.api_version)
            response = wire.encode_response(
                head.api_key, head.api_version, head.correlation_id, wire.build(cls, result)
            )
        if self.metrics is not None:
            self.metrics.request(
                api.name,
                time.perf_counter() - began,
                len(frame),
                len(response) if response is not None else 0,
            )
        return response


_BEFORE_AUTH = frozenset(
    {wire.API_VERSIONS_KEY, wire.ApiKey.SASL_HANDSHAKE, wire.ApiKey.SASL_AUTHENTICATE}
)


def _authenticated(conn: Connection) -> bool:
    """Whether ``conn`` may send any request: authenticated, within its session."""
    if not conn.authenticated:
        return False
    return conn.session_expiry is None or time.monotonic() < conn.session_expiry


def _raise_fd_limit() -> None:
    """Each open partition holds a few files: allow as many as the hard limit permits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _run(config: BrokerConfig, ready: Any = None, *, ack_fence: bool = True) -> None:
    # handlers first: a SIGTERM that arrives while starting still stops the broker cleanly
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    _raise_fd_limit()
    broker = Broker(config, ack_fence=ack_fence)
    await broker.start()
    if ready is not None:
        ready(broker)
    try:
        await stop.wait()
    finally:
        await broker.stop()


def run(config: BrokerConfig, *, ack_fence: bool = True) -> None:
    """Run a broker in the foreground until SIGTERM or SIGINT (``ack_fence``: ``Broker``,
    for measurement only)."""
    # Decoding a 1 MB produce batch creates ~8k short-lived record objects; with the default
    # generation-0 threshold (700) the cyclic collector ran ~11 times per batch and took a
    # third of the event loop (py-spy). Nothing on the hot path builds cycles, so collect
    # rarely, and move start-up objects out of the collector's way.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    asyncio.run(_run(config, ack_fence=ack_fence))
