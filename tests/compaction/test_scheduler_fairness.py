"""The scheduler starves no job: retention runs within its interval while compaction of an
always-dirty topic takes the only job slot, and compacted topics take turns.

The first test is the soak that found the starvation, made small: a real broker, a
confluent-kafka producer writing without pause to a compacted topic of 500 keys
(``min.cleanable.dirty.ratio=0.1``: always dirty) and to a topic with small segments and
``retention.bytes``, and ``sparklog scheduler --max-jobs 1`` running real compaction jobs
through spark-submit.sh. The second drives ``Scheduler.tick`` with a stand-in for
spark-submit.sh (a script that only sleeps: what is tested is which job the scheduler
starts, and when).
"""

from __future__ import annotations

import datetime
import itertools
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from sparklog.compaction.scheduler import Scheduler
from sparklog.storage import Storage
from sparklog_testkit.processes import BrokerProcess

from .helpers import SchedulerProcess, manifest

REPO = Path(__file__).resolve().parents[2]
CHANGELOG, EVENTS = "changelog", "events"
RETENTION_BYTES = 120_000
SEGMENT_BYTES = 16_384
MIN_INTERVAL_S = 2
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _at(line: str) -> float:
    m = TIMESTAMP.match(line)
    assert m, line
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    data = str(tmp_path / "data")
    storage = Storage(data)
    storage.topics.create(
        CHANGELOG, 1,
        {"cleanup.policy": "compact", "segment.bytes": "20000", "min.compaction.lag.ms": "0",
         "min.cleanable.dirty.ratio": "0.1", "file.delete.delay.ms": "2000"},
    )  # fmt: skip
    storage.topics.create(
        EVENTS, 1,
        {"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(RETENTION_BYTES),
         "file.delete.delay.ms": "2000"},
    )  # fmt: skip
    conf = tmp_path / "broker.toml"
    conf.write_text("[broker]\nmanifest_refresh_ms = 200\ngc_interval_ms = 1000\n")
    b = BrokerProcess(data, extra=("--config", str(conf))).start()
    yield b
    b.stop()
    b.kill()


class Writer:
    """One producer thread: 500 keys to the compacted topic, and events, without pause."""

    def __init__(self, bootstrap: str) -> None:
        # batches of at most one segment: a batch over retention.bytes would be an active
        # segment of one frame, which never rolls, and retention could not bring the topic
        # within its limit however well the scheduler did (how big librdkafka's default
        # 1 MB batches grow depends on how fast this thread runs)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 10, "batch.size": SEGMENT_BYTES}
        )
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        seq = 0
        while not self.stop.is_set():
            for _ in range(50):
                key = b"k%03d" % (seq % 500)
                self.producer.produce(CHANGELOG, b"x" * 80, key, on_delivery=done)
                self.producer.produce(EVENTS, b"e" * 80, b"%d" % seq, on_delivery=done)
                seq += 1
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(30)


def _sealed_bytes(broker: BrokerProcess) -> int:
    return sum(s.size_bytes for s in manifest(Storage(broker.data_dir), 0, EVENTS).segments[:-1])


@pytest.mark.slow
@pytest.mark.spark
def test_retention_runs_within_its_interval_while_an_always_dirty_topic_compacts(
    broker: BrokerProcess,
) -> None:
    writer = Writer(broker.bootstrap)
    writer.thread.start()
    sched = SchedulerProcess(
        broker.data_dir, "--min-interval", str(MIN_INTERVAL_S), "--max-interval", "30",
        "--max-jobs", "1",
    )  # fmt: skip
    try:
        sched.wait_for(
            lambda: sum("compaction of topic changelog done" in ln for ln in sched.lines) >= 2, 240
        )
        writer.stop.set()
        writer.thread.join(60)
        # once writing stops, the next retention run brings the topic within its limit (what
        # retention leaves is under retention.bytes plus the segment it may not split)
        sched.wait_for(lambda: _sealed_bytes(broker) < RETENTION_BYTES + 2 * SEGMENT_BYTES, 30)
    finally:
        writer.stop.set()
        writer.thread.join(60)
        sched.stop()
    lines, log = list(sched.lines), sched.log
    assert not writer.errors, writer.errors[:5]
    assert "compaction of topic events" not in log  # a delete-only topic is never compacted
    retained = [_at(ln) for ln in lines if f"[retention {EVENTS}]" in ln]
    starts = [_at(ln) for ln in lines if f"starting compaction of topic {CHANGELOG}" in ln]
    ends = [_at(ln) for ln in lines if f"compaction of topic {CHANGELOG} done" in ln]
    assert len(starts) >= 2 and len(retained) >= 3, log
    # retention ran while compaction jobs held the only slot ...
    during = [t for t in retained if any(s < t < e for s, e in zip(starts, ends, strict=False))]
    assert during, log
    # ... and never fell behind its interval by more than a tick and a slow run
    gaps = [b - a for a, b in itertools.pairwise(retained)]
    assert max(gaps) < MIN_INTERVAL_S + 4, (gaps, log)
    assert "still over its limits" not in log


def _stand_in_spark_submit(tmp_path: Path) -> tuple[str, Path]:
    """A script taking spark-submit.sh's place: records its job and topic, sleeps 1 s."""
    record = tmp_path / "jobs.txt"
    script = tmp_path / "spark-submit.sh"
    script.write_text(f'#!/bin/sh\necho "$1 $3" >> {record}\nsleep 1\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), record


def test_compacted_topics_take_turns_and_retention_never_waits_for_a_slot(
    tmp_path: Path, root: str
) -> None:
    from .helpers import Model, append

    storage = Storage(root)
    now = int(time.time() * 1000)
    for topic in ("c1", "c2", "c3"):
        storage.topics.create(topic, 1, {"cleanup.policy": "compact"})
        for _ in range(2):
            append(storage, Model(), 0, [b"k"] * 5, [b"v"] * 5, ts=now - 60_000, topic=topic)
    storage.topics.create("r", 1, {"retention.bytes": "0"})
    spark_submit, record = _stand_in_spark_submit(tmp_path)
    s = Scheduler(root, spark_submit=spark_submit, min_interval_s=0.5, max_interval_s=1,
                  max_jobs=1)  # fmt: skip
    retained_while_busy = 0
    deadline = time.monotonic() + 9
    log_start = 0
    while time.monotonic() < deadline:
        if s.running:
            # a new segment for retention to drop, while the only slot is taken
            append(storage, Model(), 0, [b"x"], [b"y"], ts=now, topic="r")
            s.tick()
            after = manifest(storage, 0, "r").log_start_offset
            retained_while_busy += after > log_start
            log_start = after
        else:
            s.tick()
        time.sleep(0.1)
    s.shutdown()
    jobs = record.read_text().split("\n")[:-1]
    topics = [line.split()[1] for line in jobs]
    assert all(line.startswith("compaction ") for line in jobs)  # retention is no job
    assert len(topics) >= 5, topics
    assert set(topics[:3]) == {"c1", "c2", "c3"}  # each got a turn before any got two
    assert all(a != b for a, b in itertools.pairwise(topics)), topics
    assert retained_while_busy >= 3
