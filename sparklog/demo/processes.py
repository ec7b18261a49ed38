"""Brokers and etcd in child processes on loopback: what the demos start, as a user would
(not part of the broker). The tests and benchmarks start them through ``sparklog_testkit``,
which adds what only they need (etcd with TLS and users, another launcher, a TCP proxy).

``BrokerProcess`` runs ``python -m sparklog.cli broker start --data-dir DIR --listen
127.0.0.1:PORT`` (port 0: the kernel picks one) and reads the port from the "listening on
HOST:PORT" line the broker logs on stderr; every line it logs is kept in ``lines``. On
Linux the child asks the kernel to SIGKILL it if its parent dies, so a crashed demo or
test never leaves a broker behind. ``stop`` is SIGTERM (the broker syncs and closes its
logs) with SIGKILL after a timeout; ``kill`` is SIGKILL alone. ``program`` is what the
interpreter runs with the ``broker start`` arguments (``-m sparklog.cli``).
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
from pathlib import Path

LISTENING = re.compile(r"listening on (\S+?):(\d+)")
ENDPOINT = re.compile(r"([A-Z_]+)://(\S+?):(\d+)")
REGISTRY = re.compile(r"schema registry serving at https?://\S+?:(\d+)")
METRICS = re.compile(r"metrics serving at http://\S+?:(\d+)/metrics")
_PROJECT = Path(__file__).resolve().parents[2]  # the checkout: the child imports its sparklog
_PR_SET_PDEATHSIG = 1


#: loaded here, in the parent: ``die_with_parent`` runs between fork and exec, where a
#: dlopen in a process with other threads (gRPC's, in the tests) may deadlock or crash
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


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
    ) -> None:
        self.data_dir = data_dir
        #: what the interpreter runs with ``broker start ...`` (see the module docstring)
        self.program: tuple[str, ...] = ("-m", "sparklog.cli")
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
            sys.executable,
            *self.program,
            "broker",
            "start",
            "--data-dir",
            self.data_dir,
            "--listen",
            self._listen(),
            *self.extra,
        ]
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdCluster:
    """``members`` etcd servers (Debian's ``etcd-server``, ``etcd`` on the PATH) on loopback
    in one cluster, each with its data dir under ``work_dir``: the coordination service of
    cluster mode in the tests, benchmarks and the cluster demo.

    ``endpoints`` is the ``HOST:PORT,...`` list brokers take (``--etcd``).
    ``stop_member(i)`` SIGKILLs one member and ``start_member(i)`` brings it back on its
    ports and data dir, so a test can take a minority (or the quorum) down. The children
    die with their parent. ``scheme`` and ``client_flags`` are what a member's clients
    connect with: plaintext here.
    """

    scheme = "http"

    def __init__(self, work_dir: str, members: int = 1) -> None:
        self.work_dir = Path(work_dir)
        self.client_ports = [_free_port() for _ in range(members)]
        self.peer_ports = [_free_port() for _ in range(members)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self.token = f"sparklog-{os.getpid()}-{time.monotonic_ns()}"

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def client_flags(self) -> list[str]:
        """More ``etcd`` flags for the client side of every member (none here)."""
        return []

    def _cmd(self, i: int) -> list[str]:
        cluster = ",".join(f"m{j}=http://127.0.0.1:{p}" for j, p in enumerate(self.peer_ports))
        scheme = self.scheme
        return [
            "etcd",
            "--name",
            f"m{i}",
            "--data-dir",
            str(self.work_dir / f"m{i}"),
            "--listen-client-urls",
            f"{scheme}://127.0.0.1:{self.client_ports[i]}",
            "--advertise-client-urls",
            f"{scheme}://127.0.0.1:{self.client_ports[i]}",
            *self.client_flags(),
            "--listen-peer-urls",
            f"http://127.0.0.1:{self.peer_ports[i]}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{self.peer_ports[i]}",
            "--initial-cluster",
            cluster,
            "--initial-cluster-token",
            self.token,
            "--initial-cluster-state",
            "new",
            # loopback: short heartbeats, so a lost leader is replaced within a second
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
        ]

    def start_member(self, i: int) -> None:
        log = open(self.work_dir / f"m{i}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[i] = subprocess.Popen(
            self._cmd(i),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
        )
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
    ) -> None:
        self.data_dir = data_dir
        self.endpoints = endpoints
        flags = ("--etcd", endpoints, "--lease-ttl-ms", str(lease_ttl_ms), *extra)
        racks = racks or {}
        self.brokers = {}
        for i in range(1, n + 1):
            rack = ("--rack", racks[i]) if i in racks else ()
            self.brokers[i] = BrokerProcess(
                data_dir,
                extra=("--node-id", str(i), *flags, *rack),
                listen=listen,
                schema_registry=schema_registry,
                metrics=metrics,
            )

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
