"""Hypothesis fuzzing of ``wire.parse_request`` on random and mutated frames: it returns or
raises ``FrameError``. kio parses in native code, and a native crash would take pytest down
with it, so these run in a sandbox child process (address space capped at 2 GiB so that an
oversized allocation fails the same way on every machine); a dead child is a failed
example.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from sparklog.kafka import wire
from tests.broker import raw_frames as rf

from .strategies import MUTATED_REQUESTS, RANDOM_BODY_REQUESTS, supported

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("SPARKLOG_FUZZ_EXAMPLES", "300"))
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


SANDBOX = r"""
import resource, struct, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from sparklog.kafka import wire
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    frame = inp.read(struct.unpack(">I", head)[0])
    try:
        wire.parse_request(frame)
        res = "ok"
    except wire.FrameError:
        res = "frame-error"
    except BaseException as e:
        res = f"other {type(e).__module__}.{type(e).__qualname__}: {str(e)[:300]}"
    data = res.encode()
    out.write(struct.pack(">I", len(data)) + data)
    out.flush()
"""


class ParseSandbox:
    """``wire.parse_request`` in a child process: a native crash is an answer, not the end
    of the test run."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_BACKTRACE": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SANDBOX],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        return self.proc

    def parse(self, frame: bytes) -> str:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(struct.pack(">I", len(frame)) + frame)
            proc.stdin.flush()
            head = proc.stdout.read(4)
        except BrokenPipeError:
            head = b""
        if len(head) < 4:
            return self._crashed(proc)
        return proc.stdout.read(struct.unpack(">I", head)[0]).decode()

    def _crashed(self, proc: subprocess.Popen[bytes]) -> str:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        tail = proc.stderr.read().decode(errors="replace").strip().splitlines()[:3]
        self.proc = None
        return f"crash: exit {proc.returncode}: {' | '.join(tail)}"

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for f in (self.proc.stdout, self.proc.stderr):
                if f is not None:
                    f.close()
            self.proc = None


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ParseSandbox]:
    s = ParseSandbox()
    try:
        yield s
    finally:
        s.close()


@settings(max_examples=EXAMPLES, deadline=None, phases=NO_SHRINK)
@given(RANDOM_BODY_REQUESTS)
def test_parse_request_random_bodies(sandbox: ParseSandbox, frame: bytes) -> None:
    assert sandbox.parse(frame) in {"ok", "frame-error"}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(MUTATED_REQUESTS.filter(supported))
def test_parse_request_mutated_valid_requests(sandbox: ParseSandbox, frame: bytes) -> None:
    """Frames whose key and version the broker supports (it refuses others before parsing)."""
    assert sandbox.parse(frame) in {"ok", "frame-error"}


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (3, 12, b"\xff\xff\xff\xff\x0f" + bytes(30)),  # compact array: 2^32 - 2 topics
        (3, 1, b"\x7f\xff\xff\xff" + bytes(30)),  # int32 array: 2^31 - 1 topics
        (19, 7, b"\xff\xff\xff\xff\x0f"),  # CreateTopics v7: 2^32 - 2 topics
    ],
    ids=["metadata-v12-compact", "metadata-v1-int32", "create-topics-v7-compact"],
)
def test_parse_request_huge_array_count_is_frame_error(
    sandbox: ParseSandbox, key: int, version: int, body: bytes
) -> None:
    """BUG (kio native reader, rust/src/schema.rs ``read_field``): an array count is
    used as ``Vec::with_capacity(n)`` before any element is read, so a 40-byte frame asks
    for 16-32 GiB and the process aborts (Rust OOM) instead of raising FrameError."""
    assert sandbox.parse(rf.header_bytes(key, version) + body) == "frame-error"


@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x00\x12\x00", b"\x00\x12\x00\x00\x00\x00"])
def test_parse_request_shorter_than_a_header_is_frame_error(frame: bytes) -> None:
    with pytest.raises(wire.FrameError):
        wire.parse_request(frame)


@pytest.mark.parametrize(("key", "version"), [(999, 0), (-1, 0), (0, 2), (0, 99), (18, 99)])
def test_parse_request_unknown_key_or_version_is_frame_error(key: int, version: int) -> None:
    """``parse_request`` has no schema for these; the server checks APIS before calling it,
    so this is latent - but callers are promised FrameError for unparsable frames."""
    with pytest.raises(wire.FrameError):
        wire.parse_request(struct.pack(">hhih", key, version, 1, -1) + bytes(16))
