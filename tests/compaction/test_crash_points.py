"""The real job process dies at each of its crash points; each partition must then hold
exactly its old or its new segment set, open cleanly, and read back every record it should.

For every ``retention.*`` and ``compaction.*`` name in ``sparklog.storage.crashpoints.points()``
``./spark-submit.sh`` runs the job with ``SPARKLOG_CRASH_AT=<point>`` over a topic of two
partitions, each with three sealed segments and an active one. Points on the driver kill
the driver (``CRASH_EXIT_CODE``); ``compaction.after_segment_write`` kills a Python worker
inside a Spark task, which fails the job (exit status 1). Each crash runs once per session;
every test works on its own copy of what it left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparklog.cli.exits import ExitCode
from sparklog.compaction.compactor import compact
from sparklog.compaction.retention import apply_retention
from sparklog.storage import Storage, crashpoints, names
from sparklog.storage.log import PartitionLog

from .helpers import TOPIC, Model, append, manifest, read_all, rows

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 300
HOUR = 3600 * 1000
PARTITIONS = 2
SEGMENTS = 3
PER_SEGMENT = 10

#: point -> (job, expected exit status, partitions holding the new set afterwards)
CASES: dict[str, tuple[str, int, tuple[int, ...]]] = {
    "retention.after_commit": ("retention", crashpoints.CRASH_EXIT_CODE, (0,)),
    "compaction.after_segment_write": ("compaction", ExitCode.FAILED, ()),
    "compaction.after_write": ("compaction", crashpoints.CRASH_EXIT_CODE, ()),
    "compaction.after_commit": ("compaction", crashpoints.CRASH_EXIT_CODE, (0,)),
}
POINTS = list(CASES)


@dataclass(frozen=True)
class Crash:
    point: str
    returncode: int
    stdout: str
    stderr: str
    root: str
    models: tuple[Model, ...]


def _history(root: str) -> tuple[Model, ...]:
    """Per partition: 3 sealed segments of updates to keys k0..k4 (with one tombstone),
    their records two hours old, then 2 records in the active segment."""
    storage = Storage(root)
    storage.topics.create(
        TOPIC, PARTITIONS, {"cleanup.policy": "compact,delete", "retention.ms": str(HOUR)}
    )
    old = int(time.time() * 1000) - 2 * HOUR
    models = []
    for p in range(PARTITIONS):
        model = Model()
        for s in range(SEGMENTS):
            keys = [b"k%d" % (i % 5) for i in range(PER_SEGMENT)]
            values = [None if (s, i) == (1, 3) else b"p%d-s%d-%d" % (p, s, i) for i in range(10)]
            append(storage, model, p, keys, values, ts=old + s * PER_SEGMENT)
        append(storage, model, p, [b"k0", b"k9"], [b"new", b"new"], ts=old + HOUR * 2, roll=False)
        models.append(model)
    return tuple(models)


def _run_job(root: str, point: str, job: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKLOG_CRASH_AT": point}
    return subprocess.run(
        [str(REPO / "spark-submit.sh"), job, "--topic", TOPIC, "--data-dir", root],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )


@pytest.fixture(scope="session")
def crash_cache() -> dict[str, Crash]:
    return {}


@pytest.fixture
def crash_at(
    crash_cache: dict[str, Crash], tmp_path_factory: pytest.TempPathFactory, root: str
) -> Callable[[str], Crash]:
    """Crash the job at ``point`` (once per session) and copy what it left to ``root``."""

    def run(point: str) -> Crash:
        crash = crash_cache.get(point)
        if crash is None:
            pristine = str(tmp_path_factory.mktemp("jobcrash") / "data")
            models = _history(pristine)
            proc = _run_job(pristine, point, CASES[point][0])
            crash = Crash(point, proc.returncode, proc.stdout, proc.stderr, pristine, models)
            crash_cache[point] = crash
        shutil.copytree(crash.root, root)
        return crash

    return run


OLD_SET = [
    *(names.segment_name(s * PER_SEGMENT) for s in range(SEGMENTS)),
    names.segment_name(SEGMENTS * PER_SEGMENT, kind=names.ACTIVE_KIND),
]
SECTION_END = SEGMENTS * PER_SEGMENT


def _new_set(job: str) -> list[str]:
    if job == "retention":
        return OLD_SET[-1:]
    return [names.segment_name(0, generation=1), OLD_SET[-1]]


def _expected(job: str, model: Model, new: bool) -> list[Any]:
    if not new:
        return model.records
    if job == "retention":
        return model.records[SECTION_END:]
    return model.compacted(SECTION_END)


def _names(storage: Storage, p: int) -> list[str]:
    return [s.name for s in manifest(storage, p).segments]


def test_every_job_crash_point_has_a_case() -> None:
    jobs_points = [
        p for p in crashpoints.points() if p.split(".")[0] in ("retention", "compaction")
    ]
    assert sorted(jobs_points) == sorted(POINTS)


@pytest.mark.parametrize("point", POINTS)
def test_job_dies_at_the_point_with_the_expected_status(
    crash_at: Callable[[str], Crash], point: str
) -> None:
    crash = crash_at(point)
    assert crash.returncode == CASES[point][1], f"{crash.stdout}\n{crash.stderr}"
    assert "done in" not in crash.stdout


def test_a_task_dying_fails_the_job_with_one_clear_line(crash_at: Callable[[str], Crash]) -> None:
    """spark-submit sends the Python driver's stderr to its stdout."""
    crash = crash_at("compaction.after_segment_write")
    output = (crash.stdout + crash.stderr).splitlines()
    failed = [ln for ln in output if ln.startswith("compaction: FAILED: ")]
    assert failed == [
        "compaction: FAILED: Spark job aborted (Task 0 in stage 16.0 failed 1 times): "
        "Python worker exited unexpectedly (crashed)"
    ] or (len(failed) == 1 and "Python worker exited unexpectedly" in failed[0]), output


@pytest.mark.parametrize("point", POINTS)
def test_each_partition_holds_exactly_the_old_or_the_new_set(
    crash_at: Callable[[str], Crash], root: str, point: str
) -> None:
    crash_at(point)
    job, _status, new_parts = CASES[point]
    storage = Storage(root)
    for p in range(PARTITIONS):
        assert _names(storage, p) == (_new_set(job) if p in new_parts else OLD_SET), p


@pytest.mark.parametrize("point", POINTS)
def test_the_log_opens_cleanly_and_reads_back_what_its_set_holds(
    crash_at: Callable[[str], Crash], root: str, point: str
) -> None:
    crash = crash_at(point)
    job, _status, new_parts = CASES[point]
    storage = Storage(root)
    for p in range(PARTITIONS):
        log = storage.open_log(TOPIC, p)
        try:
            assert log.recovery.truncated_bytes == 0
            assert log.recovery.deleted_orphans == []
            assert log.high_watermark == SECTION_END + 2
            expected = _expected(job, crash.models[p], p in new_parts)
            assert rows(log.batches(log.log_start_offset)) == expected
        finally:
            log.close()
        assert read_all(storage, p) == expected


@pytest.mark.parametrize("point", POINTS)
def test_appends_continue_at_the_next_offset_after_the_crash(
    crash_at: Callable[[str], Crash], root: str, point: str
) -> None:
    crash_at(point)
    storage = Storage(root)
    model = Model()
    append(storage, model, 1, [b"k1"], [b"later"], ts=int(time.time() * 1000))
    assert model.records[0][0] == SECTION_END + 2


@pytest.mark.parametrize("point", [p for p in POINTS if CASES[p][0] == "compaction"])
def test_files_written_before_the_commit_are_orphans_the_writer_removes(
    crash_at: Callable[[str], Crash], root: str, point: str
) -> None:
    crash_at(point)
    _job, _status, new_parts = CASES[point]
    storage = Storage(root)
    p = 1  # never committed at any of these points
    assert p not in new_parts
    path = names.partition_dir(storage.root, TOPIC, p)
    orphans = {n for n in os.listdir(path) if n.startswith(names.segment_name(0)[:20] + ".0")}
    if point != "compaction.after_segment_write":
        out = names.segment_name(0, generation=1)
        assert orphans == {out, names.offset_index_name(out), names.time_index_name(out)}
    config = storage.topics.get(TOPIC).config
    log = PartitionLog.open(storage.fs, storage.root, TOPIC, p, config)
    try:
        assert orphans <= set(os.listdir(path))  # within the orphan grace
        deleted = set(log.collect_garbage(orphan_grace_ms=0).deleted)
        assert orphans <= deleted
        assert _names(storage, p) == OLD_SET
    finally:
        log.close()


def test_files_a_commit_dropped_stay_for_readers_until_the_delete_delay(
    crash_at: Callable[[str], Crash], root: str
) -> None:
    crash_at("compaction.after_commit")
    storage = Storage(root)
    path = names.partition_dir(storage.root, TOPIC, 0)
    config = storage.topics.get(TOPIC).config
    # the crash may have run earlier in the session, longer ago than the delay: read the
    # clock as of its commit
    committed = manifest(storage).committed_ms / 1000
    PartitionLog.open(storage.fs, storage.root, TOPIC, 0, config, clock=lambda: committed).close()
    assert set(OLD_SET[:-1]) <= set(os.listdir(path))
    later = committed + config.file_delete_delay_ms / 1000 + 1
    PartitionLog.open(storage.fs, storage.root, TOPIC, 0, config, clock=lambda: later).close()
    assert not set(OLD_SET[:-1]) & set(os.listdir(path))


def test_rerunning_retention_after_its_crash_finishes_the_other_partitions(
    crash_at: Callable[[str], Crash], root: str
) -> None:
    crash = crash_at("retention.after_commit")
    report = apply_retention(root, [TOPIC])
    assert [o.segments_deleted for o in report.outcomes] == [0, SEGMENTS]
    storage = Storage(root)
    for p in range(PARTITIONS):
        assert read_all(storage, p) == crash.models[p].records[SECTION_END:]


def test_rerunning_compaction_after_its_crash_finishes_the_other_partitions(
    spark: Any, crash_at: Callable[[str], Crash], root: str
) -> None:
    crash = crash_at("compaction.after_commit")
    report = compact(spark, root, [TOPIC])
    assert [o.status for o in report.outcomes] == ["skipped", "compacted"]
    storage = Storage(root)
    for p in range(PARTITIONS):
        assert read_all(storage, p, start=0) == crash.models[p].compacted(SECTION_END)
