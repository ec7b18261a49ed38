"""Apache Kafka 4.3.1 as the benchmarks' peer: a single-node KRaft broker (broker and
controller in one JVM) from the Maven-fetched jars (``.jars/kafka``, ``make setup``), on
loopback, with a temporary log dir.

    with KafkaServer(tmp_dir) as kafka:        # or flush_messages=1: fsync before the ack
        bootstrap = kafka.bootstrap

Start: ``kafka.tools.StorageTool format`` (a random cluster id, ``--standalone``: this node
is the whole controller quorum), then ``kafka.Kafka server.properties``; ready when the
client port accepts connections. Stop: SIGTERM (a controlled shutdown), SIGKILL after 30 s.
Topic settings common to both brokers of a benchmark are left to the benchmark: it creates
its topics with an admin client, as it does on sparklog. ``properties`` (over the default
``server.properties``) and ``format_args`` (more ``StorageTool format`` arguments) add
listeners, TLS and SCRAM users (``bench/security.py``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType

from sparklog.jars import kafka_classpath
from sparklog_testkit.processes import die_with_parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaServer:
    """See the module docstring."""

    def __init__(
        self, work_dir: str, *, flush_messages: int | None = None, heap: str = "1g",
        properties: dict[str, str] | None = None, format_args: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.work_dir = Path(work_dir)
        self.flush_messages = flush_messages
        self.heap = heap
        #: more ``server.properties`` (over the defaults: e.g. more listeners, TLS, SASL)
        self.properties = dict(properties or {})
        #: more ``StorageTool format`` arguments (e.g. ``--add-scram ...``)
        self.format_args = tuple(format_args)
        self.port = _free_port()
        self.controller_port = _free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """CPU seconds the Kafka JVM has used so far (what ``BrokerProcess`` reports too)."""
        from _machine import process_cpu_seconds

        return process_cpu_seconds(self.pid)

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("kafka died:\n" + "\n".join(self.lines[-20:]))

    def _java(self, *args: str) -> list[str]:
        java = shutil.which("java") or "java"
        return [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", "-cp", kafka_classpath(), *args]

    def _properties(self) -> Path:
        logs = self.work_dir / "kafka-logs"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(logs),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        if self.flush_messages is not None:
            props["log.flush.interval.messages"] = str(self.flush_messages)
        props.update(self.properties)
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self, timeout: float = 120.0) -> KafkaServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        props = self._properties()
        fmt = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={_cluster_id()}", "-c",
                       str(props), "--standalone", *self.format_args),
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(props)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        proc = self.proc

        def drain() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.lines.append(line.rstrip())
                del self.lines[:-500]

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError("kafka exited:\n" + "\n".join(self.lines[-40:]))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    msg = "kafka did not start:\n" + "\n".join(self.lines[-40:])
                    raise RuntimeError(msg) from None
                time.sleep(0.2)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _cluster_id() -> str:
    """A random Kafka cluster id: 16 bytes, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
