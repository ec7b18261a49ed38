"""A broker in a child process: the harness of the embedded demo, the tests and the benchmarks
(not part of the broker: it only starts one, as a user would).

``BrokerProcess`` runs ``python -m sparklog.cli broker start --data-dir DIR --listen
127.0.0.1:PORT`` (port 0: the kernel picks one) and reads the port from the "listening on
HOST:PORT" line the broker logs on stderr; every line it logs is kept in ``lines``. On
Linux the child asks the kernel to SIGKILL it if its parent dies, so a crashed demo or
test never leaves a broker behind. ``stop`` is SIGTERM (the broker syncs and closes its
logs) with SIGKILL after a timeout; ``kill`` is SIGKILL alone. ``launcher`` replaces
``-m sparklog.cli`` with another script that takes the same ``broker start`` arguments
(a benchmark's own, e.g. ``bench/_unfenced_broker.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparklog.cluster.etcd import EtcdSettings

LISTENING = re.compile(r"listening on (\S+?):(\d+)")
ENDPOINT = re.compile(r"([A-Z_]+)://(\S+?):(\d+)")
REGISTRY = re.compile(r"schema registry serving at https?://\S+?:(\d+)")
METRICS = re.compile(r"metrics serving at http://\S+?:(\d+)/metrics")
_PROJECT = Path(__file__).resolve().parents[1]
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class BrokerProcess:
    """See the module docstring. ``with BrokerProcess(dir) as b:`` starts and stops it."""

    def __init__(
        self,
        data_dir: str,
        *,
        port: int = 0,
        extra: tuple[str, ...] = (),
        listen: str = "",
        schema_registry: bool = False,
        metrics: bool = False,
        launcher: tuple[str, ...] = ("-m", "sparklog.cli"),
    ) -> None:
        self.data_dir = data_dir
        #: what the interpreter runs with ``broker start ...`` (see the module docstring)
        self.launcher = launcher
        #: serve the Schema Registry (on a free port, kept on a restart): ``registry_url``
        self.schema_registry = schema_registry
        self.registry_port = 0
        #: serve /metrics (on a free port, kept on a restart): ``metrics_url``
        self.metrics = metrics
        self.metrics_port = 0
        self.port = port
        #: several listeners (``"SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"``): their
        #: ports are in ``endpoints`` once started, and kept on a restart
        self.listen = listen
        self.endpoints: dict[str, int] = {}
        self.extra = extra  # more ``broker start`` arguments, e.g. ("--config", PATH)
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._drain = threading.Thread()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def registry_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the broker's Schema Registry."""
        return f"http://127.0.0.1:{self.registry_port}"

    @property
    def metrics_url(self) -> str:
        """``http://127.0.0.1:PORT/metrics`` of the broker's metrics."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def address(self, protocol: str) -> str:
        """``127.0.0.1:PORT`` of the broker's ``protocol`` listener."""
        return f"127.0.0.1:{self.endpoints[protocol]}"

    def _listen(self) -> str:
        if not self.listen:
            return f"127.0.0.1:{self.port}"
        if not self.endpoints:
            return self.listen
        return ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.endpoints.items())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        """Start (or start again, on the same port and data dir) and wait until it listens."""
        cmd = [
            sys.executable, *self.launcher, "broker", "start",
            "--data-dir", self.data_dir, "--listen", self._listen(), *self.extra,
        ]  # fmt: skip
        if self.schema_registry:
            cmd += ["--schema-registry", f"127.0.0.1:{self.registry_port}"]
        if self.metrics:
            cmd += ["--metrics", f"127.0.0.1:{self.metrics_port}"]
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": str(_PROJECT) + (os.pathsep + path if path else "")}
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=die_with_parent,
        )
        found = threading.Event()
        proc = self.proc

        def drain() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.lines.append(line.rstrip())
                r = REGISTRY.search(line)
                if r and not found.is_set():
                    self.registry_port = int(r.group(1))
                mm = METRICS.search(line)
                if mm and not found.is_set():
                    self.metrics_port = int(mm.group(1))
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.port = int(m.group(2))
                    head = line.split(" (data dir")[0]
                    self.endpoints = {p: int(port) for p, _, port in ENDPOINT.findall(head)}
                    found.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                self._drain.join(5)  # the child's last words are in self.lines
                raise RuntimeError("broker did not start:\n" + "\n".join(self.lines[-40:]))
        return self

    def restart(self) -> BrokerProcess:
        return self.start()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(5)  # every line the broker logged is in self.lines
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no cleanup at all."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait_for_line(self, match: Callable[[str], bool], timeout: float = 10.0) -> str | None:
        """The first logged line ``match`` accepts, waiting up to ``timeout`` for the
        broker to log it (lines arrive through a reader thread); None if none does."""
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if match(line):
                    return line
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)

    def errors(self) -> list[str]:
        """Lines the broker logged at WARNING or above."""
        return [ln for ln in self.lines if " WARNING " in ln or " ERROR " in ln]

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class EtcdServerTls:
    """etcd's own TLS: its certificate and key (``--cert-file``, ``--key-file``) and, with
    ``client_cert_auth``, the CA its clients' certificates must chain to
    (``--trusted-ca-file --client-cert-auth``)."""

    cert_file: str
    key_file: str
    ca_file: str
    client_cert_auth: bool = True


class EtcdCluster:
    """``members`` etcd servers (Debian's ``etcd-server``, ``etcd`` on the PATH) on loopback
    in one cluster, each with its data dir under ``work_dir``: the coordination service of
    cluster mode in the tests, benchmarks and the cluster demo.

    ``endpoints`` is the ``HOST:PORT,...`` list brokers take (``--etcd``; ``https://`` on
    each with ``tls``). ``stop_member(i)`` SIGKILLs one member and ``start_member(i)``
    brings it back on its ports and data dir, so a test can take a minority (or the quorum)
    down. The children die with their parent. ``auth_token_ttl_s``: etcd's
    ``--auth-token-ttl`` (how long an unused auth token lives); ``enable_auth`` adds users
    and turns authentication on.
    """

    def __init__(
        self, work_dir: str, members: int = 1, *, tls: EtcdServerTls | None = None,
        auth_token_ttl_s: int | None = None,
    ) -> None:  # fmt: skip
        self.work_dir = Path(work_dir)
        self.tls = tls
        self.auth_token_ttl_s = auth_token_ttl_s
        self.client_ports = [_free_port() for _ in range(members)]
        self.peer_ports = [_free_port() for _ in range(members)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self.token = f"sparklog-{os.getpid()}-{time.monotonic_ns()}"

    @property
    def endpoints(self) -> str:
        scheme = "https://" if self.tls else ""
        return ",".join(f"{scheme}127.0.0.1:{p}" for p in self.client_ports)

    def _cmd(self, i: int) -> list[str]:
        cluster = ",".join(f"m{j}=http://127.0.0.1:{p}" for j, p in enumerate(self.peer_ports))
        scheme = "https" if self.tls else "http"
        secure: list[str] = []
        if self.tls:
            secure = ["--cert-file", self.tls.cert_file, "--key-file", self.tls.key_file]
            if self.tls.client_cert_auth:
                secure += ["--trusted-ca-file", self.tls.ca_file, "--client-cert-auth"]
        if self.auth_token_ttl_s is not None:
            secure += ["--auth-token-ttl", str(self.auth_token_ttl_s)]
        return [
            "etcd", "--name", f"m{i}", "--data-dir", str(self.work_dir / f"m{i}"),
            "--listen-client-urls", f"{scheme}://127.0.0.1:{self.client_ports[i]}",
            "--advertise-client-urls", f"{scheme}://127.0.0.1:{self.client_ports[i]}",
            *secure,
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
            "--initial-cluster", cluster, "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            # loopback: short heartbeats, so a lost leader is replaced within a second
            "--heartbeat-interval", "50", "--election-timeout", "500",
        ]  # fmt: skip

    def start_member(self, i: int) -> None:
        log = open(self.work_dir / f"m{i}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[i] = subprocess.Popen(
            self._cmd(i), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            preexec_fn=die_with_parent,
        )  # fmt: skip
        log.close()

    def stop_member(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self.procs[i] = None

    def start(self, timeout: float = 30.0, attempts: int = 3) -> EtcdCluster:
        """Start every member and wait until each listens. A member that exits at once
        (a port another process took between choosing and binding it) makes a new
        attempt on fresh ports and data dirs."""
        import shutil

        if shutil.which("etcd") is None:
            raise RuntimeError("etcd is not installed (Debian: apt-get install etcd-server)")
        for attempt in range(attempts):
            if attempt:
                n = len(self.procs)
                self.client_ports = [_free_port() for _ in range(n)]
                self.peer_ports = [_free_port() for _ in range(n)]
                self.token += "-again"
                for i in range(n):
                    shutil.rmtree(self.work_dir / f"m{i}", ignore_errors=True)
            self.work_dir.mkdir(parents=True, exist_ok=True)
            for i in range(len(self.procs)):
                self.start_member(i)
            problem = self._wait_listening(timeout)
            if problem is None:
                return self
            self.stop()
        raise RuntimeError(problem)

    def _wait_listening(self, timeout: float) -> str | None:
        import socket

        deadline = time.monotonic() + timeout
        for port in self.client_ports:
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    exited = any(p is not None and p.poll() is not None for p in self.procs)
                    if exited or time.monotonic() > deadline:
                        logs = "\n".join(
                            (self.work_dir / f"m{i}.log").read_text()[-1500:]
                            for i in range(len(self.procs))
                        )
                        return f"etcd did not listen on {port}:\n{logs}"
                    time.sleep(0.05)
        return None

    def stop(self) -> None:
        for i in range(len(self.procs)):
            self.stop_member(i)

    def enable_auth(
        self, admin: EtcdSettings, root_password: str, users: dict[str, str],
        prefix: bytes = b"/sparklog/",
    ) -> None:  # fmt: skip
        """Turn etcd's authentication on, as ``etcdctl user add root; role add; user add;
        auth enable`` would: ``root`` (etcd requires it), and each of ``users`` (name ->
        password) with the role ``sparklog``, which may read and write the keys under
        ``prefix``. ``admin``: how to reach this etcd (its TLS settings; no user yet)."""
        import asyncio

        from aetcd import rpc

        async def run() -> None:
            host, port = admin.addresses[0]
            client = admin.client(host, port, 10.0)
            await client.connect()
            try:
                auth = rpc.AuthStub(client.channel)
                await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=root_password))
                await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
                await auth.RoleAdd(rpc.AuthRoleAddRequest(name="sparklog"))
                end = prefix[:-1] + bytes([prefix[-1] + 1])  # every key with the prefix
                perm = rpc.Permission(permType=rpc.Permission.READWRITE, key=prefix,
                                      range_end=end)  # fmt: skip
                await auth.RoleGrantPermission(
                    rpc.AuthRoleGrantPermissionRequest(name="sparklog", perm=perm)
                )
                for name, password in users.items():
                    await auth.UserAdd(rpc.AuthUserAddRequest(name=name, password=password))
                    await auth.UserGrantRole(
                        rpc.AuthUserGrantRoleRequest(user=name, role="sparklog")
                    )
                await auth.AuthEnable(rpc.AuthEnableRequest())
            finally:
                await client.close()

        asyncio.run(run())

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BrokerCluster:
    """``n`` brokers in cluster mode over one shared data dir, coordinated through the etcd
    at ``endpoints`` (node ids 1..n). ``pause(i)``/``resume(i)`` send SIGSTOP/SIGCONT: a
    broker paused past its lease is the zombie of docs/cluster.md."""

    def __init__(
        self,
        data_dir: str,
        endpoints: str,
        n: int = 3,
        *,
        lease_ttl_ms: int = 3000,
        extra: tuple[str, ...] = (),
        racks: dict[int, str] | None = None,
        listen: str = "",
        schema_registry: bool = False,
        metrics: bool = False,
        launcher: tuple[str, ...] = ("-m", "sparklog.cli"),
    ) -> None:
        self.data_dir = data_dir
        self.endpoints = endpoints
        flags = ("--etcd", endpoints, "--lease-ttl-ms", str(lease_ttl_ms), *extra)
        racks = racks or {}
        self.brokers = {}
        for i in range(1, n + 1):
            rack = ("--rack", racks[i]) if i in racks else ()
            self.brokers[i] = BrokerProcess(
                data_dir, extra=("--node-id", str(i), *flags, *rack), listen=listen,
                schema_registry=schema_registry, metrics=metrics, launcher=launcher,
            )  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive)

    def start(self) -> BrokerCluster:
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.kill(b.pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
        for b in self.brokers.values():
            b.stop(30)

    def pause(self, i: int) -> None:
        os.kill(self.brokers[i].pid, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        os.kill(self.brokers[i].pid, signal.SIGCONT)

    def __enter__(self) -> BrokerCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TcpProxy:
    """A TCP proxy on loopback that a test can cut: ``cut()`` closes every connection
    through it and refuses new ones until ``restore()``. Put in front of etcd, it cuts one
    broker off from etcd while clients still reach the broker."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if self._cut or self._closed:
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._open -= {src, dst}

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            live, self._open = self._open, set()
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._server.close()
