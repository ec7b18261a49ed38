"""A writer SIGKILLed at random times, restarted each time, never loses or repeats an
acknowledged record.

The child (tests/storage/crash_loop_child.py) appends durable batches in a loop and prints
``ACK base last`` after each append returns; the test kills it with SIGKILL 20-200 ms after
it is ready (and, every few rounds, while it is still opening and recovering the log), then
starts it again on the same directory. Segments are 64 KiB, so kills land around rolls and
seals too. Each record carries its identity: value ``b"<writer_seq>"`` (the child resumes
its sequence after the last record in the log) and key ``b"<incarnation>"``, so a record
lost and written again by a later incarnation would show up under the wrong key.

The loop runs once per module (``crash_loop`` fixture); each test checks one property of
its outcome. Set SPARKLOG_CRASH_LOOP_SEED to replay a schedule of kill delays.
"""

from __future__ import annotations

import itertools
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.reader import PartitionReader

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("crash_loop_child.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 28
EARLY_KILL_EVERY = 4  # every 4th round is killed while opening (recovery), not appending
MIN_KILLS_WHILE_APPENDING = 20
READY_TIMEOUT_S = 60.0
SEED = int(os.environ.get("SPARKLOG_CRASH_LOOP_SEED", "20261121"))


@dataclass(frozen=True)
class Ack:
    incarnation: int
    base: int
    last: int


@dataclass
class CrashLoop:
    """What the loop observed, and the log it left, reopened once at the end."""

    root: str
    acks: list[Ack] = field(default_factory=list)
    sigkilled: int = 0
    killed_while_appending: int = 0  # killed 20-200 ms after READY
    offsets: list[int] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    sealed_segments: int = 0
    log_end_offset: int = 0


class ChildOutput:
    """Complete stdout lines of a child, read without blocking past a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.pending = b""
        self.lines: list[str] = []

    def _read(self, timeout: float) -> bool:
        """Read what is available within ``timeout``; False at end of file."""
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return True
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return False
        *complete, self.pending = (self.pending + chunk).split(b"\n")
        self.lines.extend(line.decode() for line in complete)
        return True

    def wait_for(self, prefix: str, timeout: float) -> bool:
        """Read until a line starting with ``prefix``; False if the child ended first."""
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {prefix!r} line within {timeout}s: {self.lines}")
            if not self._read(deadline - time.monotonic()):
                return False
        return True

    def drain(self) -> None:
        while self._read(READY_TIMEOUT_S):
            pass


def _spawn(root: str, incarnation: int, stderr: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), root, str(incarnation)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        bufsize=0,
    )


def _run_round(
    loop: CrashLoop, incarnation: int, *, early: bool, delay_s: float, stderr_path: Path
) -> None:
    """Start the child, SIGKILL it ``delay_s`` after it is ready (``early``: after its
    imports, so usually while it opens and recovers the log), collect its ACK lines."""
    with open(stderr_path, "ab") as stderr:
        proc = _spawn(loop.root, incarnation, stderr.fileno())
    out = ChildOutput(proc)
    try:
        started = out.wait_for("STARTING" if early else "READY", READY_TIMEOUT_S)
        if started:
            time.sleep(delay_s)
            if not early:
                loop.killed_while_appending += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=READY_TIMEOUT_S)
        out.drain()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    if proc.returncode != -signal.SIGKILL:
        raise AssertionError(
            f"round {incarnation}: child ended with {proc.returncode} before the kill:\n"
            f"{out.lines}\n{stderr_path.read_text()}"
        )
    loop.sigkilled += 1
    acks = [line.split() for line in out.lines if line.startswith("ACK ")]
    loop.acks.extend(Ack(incarnation, int(a[1]), int(a[2])) for a in acks)


def _column(batches: list[pa.RecordBatch], name: str) -> list[object]:
    return [v for b in batches for v in b.column(name).to_pylist()]


@pytest.fixture(scope="module")
def crash_loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrashLoop]:
    base = tmp_path_factory.mktemp("crash-loop")
    loop = CrashLoop(root=str(base / "data"))
    rng = random.Random(SEED)
    for incarnation in range(ROUNDS):
        early = incarnation % EARLY_KILL_EVERY == EARLY_KILL_EVERY - 1
        delay_s = rng.uniform(0.0, 0.03) if early else rng.uniform(0.02, 0.2)
        _run_round(loop, incarnation, early=early, delay_s=delay_s, stderr_path=base / "stderr.log")
    fs = LocalFileSystem()
    log = PartitionLog.open(fs, loop.root, "t", 0, TopicConfig(segment_bytes=64 * 1024))
    try:
        batches = list(log.batches(log.log_start_offset))
        loop.offsets = _column(batches, "offset")  # type: ignore[assignment]
        loop.values = _column(batches, "value")  # type: ignore[assignment]
        loop.keys = _column(batches, "key")  # type: ignore[assignment]
        loop.sealed_segments = sum(s.sealed for s in log.manifest.segments)
        loop.log_end_offset = log.log_end_offset
    finally:
        log.close()
    yield loop


def test_writer_was_sigkilled_at_least_twenty_times_while_appending(
    crash_loop: CrashLoop,
) -> None:
    assert crash_loop.sigkilled == ROUNDS
    assert crash_loop.killed_while_appending >= MIN_KILLS_WHILE_APPENDING
    assert len({a.incarnation for a in crash_loop.acks}) >= MIN_KILLS_WHILE_APPENDING // 2


def test_segments_rolled_and_sealed_across_the_kills(crash_loop: CrashLoop) -> None:
    assert crash_loop.sealed_segments >= 3


def test_offsets_are_dense_from_zero(crash_loop: CrashLoop) -> None:
    assert crash_loop.offsets == list(range(crash_loop.log_end_offset))


def test_every_value_is_in_the_log_exactly_once_in_writer_order(crash_loop: CrashLoop) -> None:
    assert len(set(crash_loop.values)) == len(crash_loop.values)
    assert crash_loop.values == [b"%d" % i for i in range(len(crash_loop.values))]


def test_acknowledged_offsets_are_never_reused(crash_loop: CrashLoop) -> None:
    acks = crash_loop.acks
    assert acks
    for earlier, later in itertools.pairwise(acks):
        assert later.base == earlier.last + 1 or (
            later.incarnation > earlier.incarnation and later.base > earlier.last
        ), (earlier, later)


def test_every_acknowledged_record_is_read_back_as_its_writer_wrote_it(
    crash_loop: CrashLoop,
) -> None:
    assert crash_loop.acks[-1].last < crash_loop.log_end_offset
    for ack in crash_loop.acks:
        for offset in range(ack.base, ack.last + 1):
            assert crash_loop.keys[offset] == b"%d" % ack.incarnation, (ack, offset)


def test_out_of_process_reader_reads_what_the_writer_left(crash_loop: CrashLoop) -> None:
    view = PartitionReader(LocalFileSystem(), crash_loop.root, "t", 0).view()
    assert view.high_watermark == crash_loop.log_end_offset
    batches = list(view.batches(0))
    assert _column(batches, "value") == crash_loop.values
    assert _column(batches, "key") == crash_loop.keys
