"""Helpers shared by the compaction tests: keyed logs written through storage, a model of
what compaction must keep, and reading a partition back (no test logic of their own)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from sparklog.storage import Storage, names
from sparklog.storage.manifest import Manifest, ManifestStore
from sparklog.storage.records import make_records

TOPIC = "t"
REPO = Path(__file__).resolve().parents[2]

Record = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


@dataclass
class Model:
    """Every record appended to one partition, and what compaction must leave of it."""

    records: list[Record] = field(default_factory=list)

    def latest(self, upto: int | None = None) -> dict[bytes, Record]:
        """The last record of each key among offsets below ``upto``."""
        out: dict[bytes, Record] = {}
        for r in self.records:
            if r[1] is not None and (upto is None or r[0] < upto):
                out[r[1]] = r
        return out

    def compacted(self, section_end: int, *, tombstones: bool = True) -> list[Record]:
        """What a read from offset 0 must return after compacting offsets below
        ``section_end``: the last record per key there (tombstones only if still kept),
        then everything after it."""
        keep = {r[0] for r in self.latest(section_end).values()}
        out = []
        for r in self.records:
            kept = r[0] in keep and (tombstones or r[2] is not None)
            if r[0] >= section_end or kept:
                out.append(r)
        return out


def append(
    storage: Storage,
    model: Model,
    partition: int,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    *,
    ts: int,
    roll: bool = True,
    topic: str = TOPIC,
) -> None:
    """Append one batch (timestamps ``ts``, ``ts + 1``, ...) and, by default, roll and seal."""
    log = storage.open_log(topic, partition)
    try:
        stamps = [ts + i for i in range(len(values))]
        r = log.append(make_records(list(values), list(keys), stamps))
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            model.records.append((r.base_offset + i, k, v, stamps[i]))
        if roll:
            log.roll()
    finally:
        log.close()


def random_batch(
    rng: random.Random, n: int, n_keys: int, *, tombstone_rate: float = 0.0, tag: str = ""
) -> tuple[list[bytes | None], list[bytes | None]]:
    keys: list[bytes | None] = [b"k%03d" % rng.randrange(n_keys) for _ in range(n)]
    values: list[bytes | None] = [
        None if rng.random() < tombstone_rate else f"{tag}-{i}-{rng.random()}".encode()
        for i in range(n)
    ]
    return keys, values


def read_all(storage: Storage, partition: int = 0, start: int | None = None) -> list[Record]:
    view = storage.reader(TOPIC, partition).view()
    begin = view.log_start_offset if start is None else start
    return rows(view.batches(begin))


def rows(batches: Iterable[pa.RecordBatch]) -> list[Record]:
    out: list[Record] = []
    for b in batches:
        ts = b.column("timestamp").cast(pa.int64()).to_pylist()
        out += zip(
            b.column("offset").to_pylist(),
            b.column("key").to_pylist(),
            b.column("value").to_pylist(),
            ts,
            strict=True,
        )
    return out


def segment_names(storage: Storage, partition: int = 0) -> list[str]:
    store = ManifestStore(storage.fs, names.partition_dir(storage.root, TOPIC, partition))
    manifest = store.latest()
    assert manifest is not None
    return [s.name for s in manifest.segments]


def manifest(storage: Storage, partition: int = 0, topic: str = TOPIC) -> Manifest:
    store = ManifestStore(storage.fs, names.partition_dir(storage.root, topic, partition))
    m = store.latest()
    assert m is not None
    return m


class SchedulerProcess:
    """``sparklog scheduler --data-dir DIR ARGS...`` as a child process of this checkout, its
    log lines collected as they come (``lines``)."""

    def __init__(self, data_dir: str, *args: str) -> None:
        cmd = [sys.executable, "-m", "sparklog.cli", "scheduler", "--data-dir", data_dir, *args]
        self.proc = subprocess.Popen(
            cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def seen(self, text: str) -> bool:
        return any(text in ln for ln in list(self.lines))

    def wait_for(self, done: Callable[[], bool], timeout: float) -> None:
        """Poll ``done`` until true; fail (with the log) if the scheduler exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not done():
            assert self.proc.poll() is None, self.log
            assert time.monotonic() < deadline, self.log
            time.sleep(0.5)

    def stop(self, timeout: float = 90) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(10)
        return code
