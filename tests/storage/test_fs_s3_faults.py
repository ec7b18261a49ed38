"""The S3 backend when the object store fails: SeaweedFS (the ``s3_server`` fixture) behind
``sparklog_testkit.s3proxy.S3FaultProxy``, which the test switches to answering 5xx,
resetting connections, stalling, or losing answers. What is checked: transient failures
are retried a bounded number of times and then succeed; lasting ones end in an
``ObjectStoreError`` naming the bucket, the endpoint, the operation and why, within a
bounded time (measured, asserted only against a generous upper bound); a create whose
answer was lost tells the caller the truth. Every test passes small timeouts explicitly
(``S3ClientSettings``) and works under a prefix of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.errors import ObjectStoreError
from sparklog.storage.fs.s3 import S3FileSystem
from sparklog.storage.fs.s3client import S3ClientSettings
from sparklog_testkit.processes import die_with_parent
from sparklog_testkit.s3proxy import S3FaultProxy

from ..support.s3 import SeaweedS3

RACE_CHILD = Path(__file__).with_name("s3_race_child.py")
REPO = Path(__file__).resolve().parents[2]
#: short backoffs, so that retries end in well under a second; a timeout long enough for
#: a loaded machine, since requests that pass must not time out
FAST = S3ClientSettings(
    timeout_ms=5000, retries=3, retry_timeout_ms=1500, backoff_ms=20, max_backoff_ms=100
)
#: for a store that stalls: every request times out, so the timeout is short
STALL = S3ClientSettings(timeout_ms=500, retries=1, retry_timeout_ms=500, backoff_ms=20)
#: what a lasting failure may take here at most, however loaded the machine (generous)
BOUND_S = 20.0


@pytest.fixture
def proxy(s3_server: SeaweedS3) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(s3_server.endpoint) as p:
        yield p


def _open(
    server: SeaweedS3, proxy: S3FaultProxy, client: S3ClientSettings = FAST
) -> tuple[S3FileSystem, str]:
    """The backend on a fresh prefix of the bucket, reaching it through ``proxy``."""
    fs = S3FileSystem(server.bucket, endpoint=proxy.endpoint, environ=server.env(), client=client)
    return fs, f"{server.bucket}/{uuid.uuid4().hex}"


def _fails(call: object) -> tuple[ObjectStoreError, float]:
    """The ObjectStoreError ``call()`` raises, and how long it took."""
    started = time.monotonic()
    with pytest.raises(ObjectStoreError) as e:
        call()  # type: ignore[operator]
    return e.value, time.monotonic() - started


# ---------------------------------------------------------------------------- the proxy


def test_the_proxy_forwards_signed_requests_on_kept_alive_connections(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """Passing through, the proxy is invisible: SigV4 signatures (which cover the Host the
    client sent) verify at the server, many requests share kept-alive connections, and
    every request is counted by method."""
    fs, root = _open(s3_server, proxy)
    for i in range(20):
        fs.write_atomic(fs.join(root, f"f{i}"), b"payload %d" % i)
    assert [fs.read_bytes(fs.join(root, f"f{i}")) for i in range(20)] == [
        b"payload %d" % i for i in range(20)
    ]
    assert proxy.requests["PUT"] == 20
    assert proxy.requests["GET"] == 20
    assert sum(proxy.faulted.values()) == 0


def test_a_child_process_reaches_the_store_through_the_proxy(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """What broker tests do: a child process gets the proxy as its ``AWS_ENDPOINT_URL``
    (``proxy.env``); the proxy's faults reach it, and it retries them."""
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    env = {**os.environ, **proxy.env(s3_server.env()), "PYTHONPATH": str(REPO)}
    proxy.fail_next(2, 503, methods="PUT")
    child = subprocess.run(
        [sys.executable, str(RACE_CHILD), uri, "7", "4"],
        env=env,
        input=b"GO\n",
        capture_output=True,
        timeout=120,
        preexec_fn=die_with_parent,
    )
    assert child.returncode == 0, child.stderr.decode()
    assert json.loads(child.stdout.decode().split("READY\n")[1]) == [0, 1, 2, 3]
    assert proxy.faulted["PUT"] == 2
    assert proxy.requests["PUT"] == 4 + 2


# ---------------------------------------------------------------------------- 5xx answers


@pytest.mark.parametrize("status", [500, 503])
def test_fewer_5xx_answers_than_the_retries_are_retried_and_the_write_succeeds(
    s3_server: SeaweedS3, proxy: S3FaultProxy, status: int
) -> None:
    fs, root = _open(s3_server, proxy)
    proxy.fail_next(FAST.retries, status)
    fs.write_atomic(fs.join(root, "f"), b"written")
    assert proxy.faulted["PUT"] == FAST.retries
    assert fs.read_bytes(fs.join(root, "f")) == b"written"


def test_fewer_5xx_answers_than_the_retries_are_retried_and_the_create_succeeds(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """The conditional PUT is retried by the backend itself (not by obstore), with the
    same budget."""
    fs, root = _open(s3_server, proxy)
    proxy.fail_next(FAST.retries, 503)
    assert fs.create_exclusive(fs.join(root, "v0"), b"mine") is True
    assert proxy.requests["PUT"] == FAST.retries + 1
    assert fs.read_bytes(fs.join(root, "v0")) == b"mine"


def test_fewer_5xx_answers_than_the_retries_are_retried_and_the_read_succeeds(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    fs, root = _open(s3_server, proxy)
    fs.write_atomic(fs.join(root, "f"), b"written")
    proxy.fail_next(FAST.retries, 503)
    assert fs.read_bytes(fs.join(root, "f")) == b"written"
    assert fs.listdir(root) == ["f"]
    assert proxy.faulted["GET"] == FAST.retries


@pytest.mark.parametrize(("status", "code"), [(500, "InternalError"), (503, "SlowDown")])
def test_5xx_forever_is_an_object_store_error_after_the_retries(
    s3_server: SeaweedS3, proxy: S3FaultProxy, status: int, code: str
) -> None:
    fs, root = _open(s3_server, proxy)
    proxy.error(status)
    error, took = _fails(lambda: fs.write_atomic(fs.join(root, "f"), b"x"))
    assert took < BOUND_S
    assert proxy.requests["PUT"] == FAST.retries + 1
    message = str(error)
    assert f"s3://{s3_server.bucket}" in message
    assert "PUT" in message
    assert proxy.endpoint in message
    assert f"answered {status} {code}" in message
    assert f"tried {FAST.retries + 1} times" in message


def test_5xx_forever_fails_a_create_after_the_retries(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    fs, root = _open(s3_server, proxy)
    proxy.error(503)
    error, took = _fails(lambda: fs.create_exclusive(fs.join(root, "v0"), b"x"))
    assert took < BOUND_S
    assert proxy.requests["PUT"] == FAST.retries + 1
    assert "answered 503 SlowDown" in str(error)


def test_only_the_filtered_method_fails(s3_server: SeaweedS3, proxy: S3FaultProxy) -> None:
    """PUTs answered 503 while GETs, HEADs and LISTs pass: the store can be read, not
    written."""
    fs, root = _open(s3_server, proxy)
    fs.write_atomic(fs.join(root, "f"), b"before")
    proxy.error(503, methods="PUT")
    _fails(lambda: fs.write_atomic(fs.join(root, "g"), b"x"))
    assert fs.read_bytes(fs.join(root, "f")) == b"before"
    assert fs.exists(fs.join(root, "f"))
    assert fs.listdir(root) == ["f"]
    assert set(proxy.faulted) == {"PUT"}


@pytest.mark.parametrize("size", [1 << 20, 25 << 20])
def test_a_file_written_through_open_output_fails_as_an_object_store_error(
    s3_server: SeaweedS3, proxy: S3FaultProxy, size: int
) -> None:
    """``open_output``'s writer (one PUT, or a multipart upload past 10 MiB: POST, part
    PUTs) fails as the other calls do, not with obstore's bare OSError."""
    fs, root = _open(s3_server, proxy)
    proxy.error(503)

    def write() -> None:
        with fs.open_output(fs.join(root, "f")) as out:
            for _ in range(size >> 20):
                out.write(b"z" * (1 << 20))

    error, took = _fails(write)
    assert took < BOUND_S
    assert "answered 503 SlowDown" in str(error)
    assert f"s3://{s3_server.bucket}: PUT" in str(error)


# ---------------------------------------------------------------------------- resets


def test_a_reset_connection_is_retried(s3_server: SeaweedS3, proxy: S3FaultProxy) -> None:
    fs, root = _open(s3_server, proxy)
    proxy.reset(count=1)
    fs.write_atomic(fs.join(root, "f"), b"x")
    proxy.reset(count=1)
    assert fs.create_exclusive(fs.join(root, "v0"), b"mine") is True
    proxy.reset(count=1)
    assert fs.read_bytes(fs.join(root, "v0")) == b"mine"
    assert sum(proxy.faulted.values()) == 3


def test_kept_alive_connections_reset_under_the_client_are_retried(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """``reset()`` also resets the idle connections the client keeps for its next
    requests; those requests find them dead and are retried on new ones."""
    fs, root = _open(s3_server, proxy)
    fs.write_atomic(fs.join(root, "f"), b"x")
    assert fs.create_exclusive(fs.join(root, "v0"), b"mine") is True
    proxy.reset()
    proxy.pass_through()
    assert fs.read_bytes(fs.join(root, "f")) == b"x"
    assert fs.create_exclusive(fs.join(root, "v1"), b"mine") is True


def test_resets_forever_are_an_object_store_error(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    fs, root = _open(s3_server, proxy)
    fs.write_atomic(fs.join(root, "f"), b"x")
    proxy.reset()
    for call in (
        lambda: fs.read_bytes(fs.join(root, "f")),
        lambda: fs.create_exclusive(fs.join(root, "v0"), b"x"),
    ):
        error, took = _fails(call)
        assert took < BOUND_S
        assert "was reset or closed before the answer came" in str(error)
        assert proxy.endpoint in str(error)


# ---------------------------------------------------------------------------- stalls


@pytest.mark.parametrize("op", ["read", "write", "create", "list"])
def test_a_stalled_store_is_an_object_store_error_within_the_timeouts(
    s3_server: SeaweedS3, proxy: S3FaultProxy, op: str
) -> None:
    """The store accepts requests and never answers (longer than any lease): every call
    ends in an ObjectStoreError after about ``retry_timeout_ms + timeout_ms``, never
    hangs."""
    setup, root = _open(s3_server, proxy)
    setup.write_atomic(setup.join(root, "f"), b"x")
    fs = S3FileSystem(
        s3_server.bucket, endpoint=proxy.endpoint, environ=s3_server.env(), client=STALL
    )
    calls = {
        "read": lambda: fs.read_bytes(fs.join(root, "f")),
        "write": lambda: fs.write_atomic(fs.join(root, "g"), b"x"),
        "create": lambda: fs.create_exclusive(fs.join(root, "v0"), b"x"),
        "list": lambda: fs.listdir(root),
    }
    proxy.stall()
    error, took = _fails(calls[op])
    assert took < BOUND_S
    assert took >= STALL.timeout_ms / 1000
    assert "did not answer in time" in str(error)
    assert "SPARKLOG_S3_TIMEOUT_MS" in str(error)


def test_a_stall_shorter_than_the_timeout_is_waited_out(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """Requests held for less than the timeout are answered when the store resumes."""
    fs, root = _open(s3_server, proxy, S3ClientSettings(timeout_ms=30_000))
    fs.write_atomic(fs.join(root, "f"), b"x")
    proxy.stall()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fs.read_bytes(fs.join(root, "f"))))
    reader.start()
    deadline = time.monotonic() + BOUND_S
    while proxy.held == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.held == 1
    proxy.pass_through()
    reader.join(BOUND_S)
    assert got == [b"x"]


def test_a_large_write_is_not_bounded_by_the_silence_timeout(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """The silence limit applies per request, and a large file goes as parts: on a link
    slow enough that one request carrying the whole file outlasts the limit (a
    create-if-absent, always one PUT, times out), ``write_atomic`` writes the same bytes
    whole, in parts of 5 MiB."""
    # one 40 MiB request: 10 s; one 5 MiB part: 1.25 s, or a few times that under load
    fs, root = _open(s3_server, proxy, S3ClientSettings(timeout_ms=8000, retries=0))
    data = os.urandom(40 << 20)
    proxy.throttle(4 << 20)
    error, _ = _fails(lambda: fs.create_exclusive(fs.join(root, "one"), data))
    assert "did not answer in time" in str(error)
    fs.write_atomic(fs.join(root, "big"), data)
    proxy.throttle(None)
    assert fs.read_bytes(fs.join(root, "big")) == data
    assert proxy.requests["POST"] >= 2  # multipart: create and complete


# ---------------------------------------------------------------------------- lost answers


def test_a_create_whose_answer_is_lost_reports_that_it_created_the_file(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """The conditional PUT reaches the store and lands, its answer is lost (the
    connection is reset instead), the retry is told the file exists: the backend reads
    the file back, finds its own bytes, and says True."""
    fs, root = _open(s3_server, proxy)
    proxy.drop_response(methods="PUT", count=1)
    assert fs.create_exclusive(fs.join(root, "v0"), b"mine") is True
    assert [h[2] for h in proxy.history if h[0] == "PUT"] == ["drop", "pass"]
    assert fs.read_bytes(fs.join(root, "v0")) == b"mine"


def test_a_retried_create_that_finds_another_writers_file_reports_the_loss(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """A first attempt that failed, then a retry told the file exists: the file holds
    another writer's bytes, so this writer lost the race, and is told so."""
    fs, root = _open(s3_server, proxy)
    assert fs.create_exclusive(fs.join(root, "v0"), b"theirs") is True
    proxy.reset(methods="PUT", count=1)
    assert fs.create_exclusive(fs.join(root, "v0"), b"mine") is False
    assert fs.read_bytes(fs.join(root, "v0")) == b"theirs"


def test_a_create_losing_a_race_without_a_fault_reads_nothing_back(
    s3_server: SeaweedS3, proxy: S3FaultProxy
) -> None:
    """The check costs a GET only after a failed attempt: a plain lost race is one PUT."""
    fs, root = _open(s3_server, proxy)
    assert fs.create_exclusive(fs.join(root, "v0"), b"same") is True
    assert fs.create_exclusive(fs.join(root, "v0"), b"same") is False
    assert proxy.requests["GET"] == 0


# ---------------------------------------------------------------------------- settings


def test_client_settings_come_from_the_sparklog_s3_variables() -> None:
    env = {
        "SPARKLOG_S3_TIMEOUT_MS": "250",
        "SPARKLOG_S3_REQUEST_TIMEOUT_MS": "9000",
        "SPARKLOG_S3_RETRIES": "0",
        "SPARKLOG_S3_RETRY_TIMEOUT_MS": "700",
    }
    assert S3ClientSettings.from_env(env) == S3ClientSettings(
        timeout_ms=250, request_timeout_ms=9000, retries=0, retry_timeout_ms=700
    )
    assert S3ClientSettings.from_env(env, timeout_ms=100).timeout_ms == 100
    assert S3ClientSettings.from_env({}) == S3ClientSettings()
    fs = S3FileSystem("b", endpoint="http://127.0.0.1:1", environ=env)
    assert fs.client.timeout_ms == 250


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"SPARKLOG_S3_TIMEOUT_MS": "2s"}, "SPARKLOG_S3_TIMEOUT_MS='2s'"),
        ({"SPARKLOG_S3_TIMEOUT_MS": "0"}, "SPARKLOG_S3_TIMEOUT_MS=0: an integer, at least 1"),
        ({"SPARKLOG_S3_RETRIES": "-1"}, "SPARKLOG_S3_RETRIES=-1: an integer, at least 0"),
    ],
)
def test_bad_client_settings_are_refused(env: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        S3ClientSettings.from_env(env)
