"""``sparklog scheduler``: check intervals from topic configs, checks that only read
manifests, and a real scheduler process running real jobs through spark-submit.sh."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from sparklog.compaction import scheduler
from sparklog.compaction.scheduler import COMPACTION, RETENTION, Scheduler, intervals, needs_work
from sparklog.storage import Storage, names
from sparklog.storage.config import TopicConfig

from .helpers import Model, SchedulerProcess, append, manifest

REPO = Path(__file__).resolve().parents[2]
HOUR = 3600 * 1000
NOW = int(time.time() * 1000)


def test_intervals_are_a_tenth_of_the_configs_clamped() -> None:
    iv = intervals(TopicConfig(), min_s=15, max_s=300)
    assert (iv.retention_s, iv.compaction_s) == (300, 300)  # a week and a day: the max
    fast = TopicConfig.from_mapping(
        {"retention.ms": "600000", "segment.ms": "1000", "delete.retention.ms": "900000"}
    )
    iv = intervals(fast, min_s=15, max_s=300)
    assert (iv.retention_s, iv.compaction_s) == (60, 15)
    forever = TopicConfig.from_mapping({"retention.ms": "-1"})
    assert intervals(forever, min_s=1, max_s=99).retention_s == 99


def test_scheduler_refuses_bad_limits(root: str) -> None:
    with pytest.raises(ValueError, match="min-interval"):
        Scheduler(root, min_interval_s=10, max_interval_s=5)
    with pytest.raises(ValueError, match="max-jobs"):
        Scheduler(root, max_jobs=0)


def _topic(storage: Storage, name: str, configs: dict[str, str], ts: int) -> None:
    storage.topics.create(name, 1, configs)
    model = Model()
    for s in range(2):
        keys = [b"k%d" % (i % 3) for i in range(6)]
        _append(storage, name, model, keys, [b"v%d-%d" % (s, i) for i in range(6)], ts)


def _append(
    storage: Storage, topic: str, model: Model, keys: list[bytes], values: list[bytes], ts: int
) -> None:
    append(storage, model, 0, list(keys), list(values), ts=ts, topic=topic)


def test_a_check_says_whether_a_job_would_change_anything(root: str) -> None:
    storage = Storage(root)
    _topic(storage, "old", {"retention.ms": str(HOUR)}, NOW - 2 * HOUR)
    _topic(storage, "young", {"retention.ms": str(HOUR)}, NOW)
    _topic(storage, "changelog", {"cleanup.policy": "compact"}, NOW - 60_000)
    assert needs_work(storage, "old", RETENTION, now_ms=NOW)
    assert not needs_work(storage, "young", RETENTION, now_ms=NOW)
    assert not needs_work(storage, "old", COMPACTION, now_ms=NOW)
    assert needs_work(storage, "changelog", COMPACTION, now_ms=NOW)
    storage.topics.create("empty", 2, {"cleanup.policy": "compact"})
    assert not needs_work(storage, "empty", COMPACTION, now_ms=NOW)


def test_job_command_passes_spark_options_before_the_job(root: str) -> None:
    Storage(root)
    s = Scheduler(root, spark_args="--master local[1] --conf spark.x=1")
    assert s.command("orders", COMPACTION) == [
        scheduler.default_spark_submit(), "--master", "local[1]", "--conf", "spark.x=1",
        "compaction", "--topic", "orders", "--data-dir", Storage(root).root,
    ]  # fmt: skip
    assert os.path.exists(scheduler.default_spark_submit())


def test_a_tick_with_nothing_due_starts_nothing(root: str) -> None:
    storage = Storage(root)
    _topic(storage, "young", {"retention.ms": str(HOUR)}, NOW)
    s = Scheduler(root, min_interval_s=1, max_interval_s=2)
    s.tick()
    assert s.running == []
    stop = threading.Event()
    stop.set()
    s.run(stop)


@pytest.mark.slow
@pytest.mark.spark
def test_scheduler_runs_the_jobs_survives_a_failing_one_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    storage = Storage(data)
    # "bad": a compacted topic whose first sealed segment is garbage: its job fails, again
    _topic(storage, "bad", {"cleanup.policy": "compact"}, NOW)
    bad_seg = names.segment_name(0)
    with open(os.path.join(names.partition_dir(storage.root, "bad", 0), bad_seg), "r+b") as f:
        f.write(b"not parquet at all")
    # "good": an old segment for retention, then updates to compact
    _topic(storage, "good", {"cleanup.policy": "compact,delete", "retention.ms": str(HOUR)},
           NOW - 2 * HOUR)  # fmt: skip
    model = Model()
    _append(storage, "good", model, [b"k0", b"k1", b"k0"], [b"a", b"b", b"c"], NOW)
    _append(storage, "good", model, [b"k1", b"k2", b"k1"], [b"d", b"e", b"f"], NOW)
    sched = SchedulerProcess(data, "--min-interval", "2", "--max-interval", "60", "--max-jobs", "2")
    try:
        sched.wait_for(
            lambda: (
                sched.seen("compaction of topic good done")
                and sched.seen("compaction of topic bad failed")
            ),
            240,
        )
        assert sched.proc.poll() is None  # it survived the failure
    finally:
        code = sched.stop()
    assert code == 0, sched.log
    assert sched.seen("[retention good] retention good-0: deleted"), sched.log
    assert sched.seen("[compaction bad] compaction: FAILED: CorruptSegmentError"), sched.log
    assert sched.seen("sparklog scheduler stopped"), sched.log
    after = manifest(storage, 0, "good")
    assert after.log_start_offset == 12
    assert all(s.generation >= 1 for s in after.segments[:-1])


def test_a_retention_warning_is_logged_once_per_state_change(
    root: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``retention.bytes`` below the active segment: the scheduler says so once, not at
    every check (the active segment growing between checks is the same state); it says
    when the partition is within its limits again, and warns again when it no longer is."""
    storage = Storage(root)
    storage.topics.create("big", 1, {"retention.bytes": "10"})
    model = Model()
    clock = [0.0]
    s = Scheduler(root, min_interval_s=1, max_interval_s=2, clock=lambda: clock[0])

    def checks(n: int, *, grow: bool = False) -> None:
        for i in range(n):
            if grow:
                _append_active(storage, model, i)
            s.tick()
            clock[0] += 5  # every check is due at every tick

    def said(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.name == "sparklog.scheduler" and r.levelno == level]  # fmt: skip

    caplog.set_level(logging.INFO, logger="sparklog.scheduler")
    checks(4, grow=True)
    held = said(logging.WARNING)
    assert len(held) == 1 and "the active segment alone holds" in held[0], held
    storage.topics.alter_configs("big", {"retention.bytes": "-1"}, [])
    checks(3)
    assert said(logging.WARNING) == held
    assert [m for m in said(logging.INFO) if "within its limits again" in m] == [
        "topic big partition 0 is within its limits again"
    ]
    storage.topics.alter_configs("big", {"retention.bytes": "10"}, [])
    checks(3)
    again = said(logging.WARNING)
    assert len(again) == 2 and "the active segment alone holds" in again[1], again


def _append_active(storage: Storage, model: Model, i: int) -> None:
    append(storage, model, 0, [b"k%d" % i] * 5, [b"v" * 100] * 5, ts=NOW, roll=False,
           topic="big")  # fmt: skip
