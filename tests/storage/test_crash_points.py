"""A real process dies at each named crash point; the log must then open cleanly.

For every name in ``sparklog.storage.crashpoints.points()`` a child Python process (with
``SPARKLOG_CRASH_AT=<point>``) opens a log that already holds a sealed segment and an
active one, appends durable batches, and starts the multi-file change the point belongs
to: a roll (``roll.*``; with auto_seal the seal that follows it, ``seal.*``) or a segment
swap committed by another process (``replace.*``: the child stands in for a compaction job,
writes the new generation-1 segment and commits ``transforms.Compact`` through its own
``ManifestStore``, as the job does). The child must die with
``CRASH_EXIT_CODE``; the test process then checks the committed manifest (the old or the
new segment set, never a mix), reopens the log, and checks the records, the offsets, and
what happened to the files the crash left behind (see the module docstring of
``sparklog.storage.log``).

Each crash runs once per test session; every test works on its own copy of the result.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.storage import crashpoints, names
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import ManifestStore
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import make_records

from .helpers import RACE_POINTS

TOPIC = "t"
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 60

#: The history every crash starts from: offsets 0..9 sealed, 10..14 in the active segment.
SEALED_END = 10
HISTORY_END = 15
#: What the child appends (durably) before the operation that crashes.
CHILD_BATCHES = (4, 4, 4)
CHILD_END = HISTORY_END + sum(CHILD_BATCHES)

SEALED_0 = names.segment_name(0)
ARROW_10 = names.segment_name(SEALED_END, kind=names.ACTIVE_KIND)
SEALED_10 = names.segment_name(SEALED_END)
ARROW_NEW = names.segment_name(CHILD_END, kind=names.ACTIVE_KIND)
COMPACTED_0 = names.segment_name(0, generation=1)

#: Segment sets of the manifest around each operation.
BEFORE_ROLL = [SEALED_0, ARROW_10]
AFTER_ROLL = [SEALED_0, ARROW_10, ARROW_NEW]
AFTER_SEAL = [SEALED_0, SEALED_10, ARROW_NEW]
BEFORE_REPLACE = [SEALED_0, ARROW_10]
AFTER_REPLACE = [COMPACTED_0, ARROW_10]
#: operation (a point's prefix) -> (the segment set before its commit, the set after it)
OPERATIONS: dict[str, tuple[list[str], list[str]]] = {
    "roll": (BEFORE_ROLL, AFTER_ROLL),
    "seal": (AFTER_ROLL, AFTER_SEAL),
    "replace": (BEFORE_REPLACE, AFTER_REPLACE),
}

#: point -> (child scenario, segment set after the reopen)
CASES: dict[str, tuple[str, list[str]]] = {
    "roll.after_new_file": ("roll", BEFORE_ROLL),
    "roll.after_commit": ("roll", AFTER_SEAL),
    "seal.before_write": ("roll", AFTER_SEAL),
    "seal.after_write": ("roll", AFTER_SEAL),
    "seal.after_commit": ("roll", AFTER_SEAL),
    "replace.after_write": ("replace", BEFORE_REPLACE),
    "replace.after_commit": ("replace", AFTER_REPLACE),
}
POINT_PARAMS = list(CASES)
#: hit by the child standing in for a job that commits a segment swap (it registers them too)
crashpoints.register("replace.after_write", "replace.after_commit")

_CHILD = textwrap.dedent(
    """
    import sys

    import pyarrow.compute as pc

    from sparklog.storage import crashpoints, names, transforms
    from sparklog.storage.config import TopicConfig
    from sparklog.storage.fs.local import LocalFileSystem
    from sparklog.storage.log import PartitionLog
    from sparklog.storage.manifest import ManifestStore, SegmentInfo
    from sparklog.storage.records import make_records
    from sparklog.storage.sealed import write_sealed

    crashpoints.register("replace.after_write", "replace.after_commit")
    root, scenario = sys.argv[1], sys.argv[2]
    batch_sizes = [int(n) for n in sys.argv[3].split(",") if n]
    config = TopicConfig.from_mapping(dict(a.split("=") for a in sys.argv[4:]))
    fs = LocalFileSystem()
    log = PartitionLog.open(fs, root, "t", 0, config)
    print("OPENED", log.log_end_offset, flush=True)
    for n in batch_sizes:
        seq = log.log_end_offset
        r = log.append(make_records([b"v%d" % s for s in range(seq, seq + n)]))
        print("ACK", r.base_offset, r.last_offset, flush=True)
    if scenario == "roll":
        log.roll()
    elif scenario == "replace":
        old = next(s for s in log.manifest.segments if s.sealed)
        kept = []
        for batch in log.batches(old.base_offset, old.next_offset):
            even = pc.equal(pc.bit_wise_and(batch.column("offset"), 1), 0)
            kept.append(batch.filter(even))
        name = names.segment_name(old.base_offset, generation=1)
        stats = write_sealed(fs, log.path, name, kept)
        new = SegmentInfo(
            name, old.base_offset, old.next_offset, records=stats.records,
            size_bytes=stats.size_bytes, min_timestamp=stats.min_timestamp,
            max_timestamp=stats.max_timestamp, created_ms=old.created_ms,
        )
        crashpoints.hit("replace.after_write")
        job = ManifestStore(fs, log.path, writer="stand-in compaction job")
        job.commit(transforms.Compact((old.name,), (new,), old.next_offset, 0, 0))
        crashpoints.hit("replace.after_commit")
    print("NO CRASH", flush=True)
    """
)


# ---------------------------------------------------------------------- running crashes


@dataclass(frozen=True)
class Crash:
    """What one child left: its exit code, its acknowledgements and the storage root."""

    point: str
    returncode: int
    acks: list[tuple[int, int]]
    stdout: str
    stderr: str
    root: str


def _values(start: int, end: int) -> list[bytes]:
    return [b"v%d" % s for s in range(start, end)]


def _write_history(fs: LocalFileSystem, root: str) -> None:
    log = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig())
    log.append(make_records(_values(0, 6)))
    log.append(make_records(_values(6, SEALED_END)))
    log.roll()
    log.append(make_records(_values(SEALED_END, HISTORY_END)))
    assert [s.name for s in log.manifest.segments] == BEFORE_ROLL
    log.close()


def _run_child(
    root: str, point: str, scenario: str, batch_sizes: Iterable[int], *configs: str
) -> subprocess.CompletedProcess[str]:
    """Run the child script; ``configs`` are topic configs as ``name=value``."""
    env = {**os.environ, "SPARKLOG_CRASH_AT": point, "PYTHONPATH": str(REPO_ROOT)}
    sizes = ",".join(str(n) for n in batch_sizes)
    return subprocess.run(
        [sys.executable, "-c", _CHILD, root, scenario, sizes, *configs],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )


def _acks(stdout: str) -> list[tuple[int, int]]:
    """The child's acknowledgements: complete "ACK first last" lines (the crash may cut the
    child's last line short: its own thread died mid-print, so the test cannot count it)."""
    return [
        (int(parts[1]), int(parts[2]))
        for parts in (line.split() for line in stdout.split("\n")[:-1])  # whole lines
        if len(parts) == 3 and parts[0] == "ACK"
    ]


@pytest.fixture(scope="session")
def crash_cache() -> dict[str, Crash]:
    return {}


@pytest.fixture
def crash_at(
    crash_cache: dict[str, Crash],
    tmp_path_factory: pytest.TempPathFactory,
    fs: LocalFileSystem,
    root: str,
) -> Callable[[str], Crash]:
    """Crash a child at ``point`` (once per session) and copy what it left to ``root``."""

    def run(point: str) -> Crash:
        crash = crash_cache.get(point)
        if crash is None:
            pristine = str(tmp_path_factory.mktemp("crash") / "data")
            _write_history(fs, pristine)
            scenario = CASES[point][0]
            proc = _run_child(pristine, point, scenario, CHILD_BATCHES)
            crash = Crash(
                point, proc.returncode, _acks(proc.stdout), proc.stdout, proc.stderr, pristine
            )
            crash_cache[point] = crash
        assert crash.returncode == crashpoints.CRASH_EXIT_CODE, (
            f"the child did not die at {point}:\n{crash.stdout}\n{crash.stderr}"
        )
        shutil.copytree(crash.root, root)
        return crash

    return run


# ---------------------------------------------------------------------- checking helpers


def _partition(root: str) -> str:
    return names.partition_dir(root, TOPIC, 0)


def _committed_names(fs: LocalFileSystem, root: str) -> list[str]:
    manifest = ManifestStore(fs, _partition(root)).latest()
    assert manifest is not None
    return [s.name for s in manifest.segments]


def _open(fs: LocalFileSystem, root: str, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(fs, root, TOPIC, 0, TopicConfig(), **kwargs)  # type: ignore[arg-type]


def _at_commit(fs: LocalFileSystem, root: str) -> Callable[[], float]:
    """A clock stopped when the crash's last manifest was committed: the crash may have run
    earlier in the session, longer ago than file.delete.delay.ms (60 s by default)."""
    manifest = ManifestStore(fs, _partition(root)).latest()
    assert manifest is not None
    return lambda: manifest.committed_ms / 1000


def _pairs(batches: Iterable[pa.RecordBatch]) -> list[tuple[int, bytes]]:
    return [
        (o, v)
        for b in batches
        for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)
    ]


def _expected_pairs(point: str) -> list[tuple[int, bytes]]:
    """Every record written before the crash, as (offset, value), after recovery."""
    everything = [(o, b"v%d" % o) for o in range(CHILD_END)]
    if point == "replace.after_commit":
        return [(o, v) for o, v in everything if o >= SEALED_END or o % 2 == 0]
    return everything


def _exists(root: str, name: str) -> bool:
    return os.path.exists(f"{_partition(root)}/{name}")


def _with_indexes(name: str) -> set[str]:
    return {name, names.offset_index_name(name), names.time_index_name(name)}


# ---------------------------------------------------------------------- every point


def test_parametrization_covers_every_storage_crash_point() -> None:
    """The jobs' points (``retention.*``, ``compaction.*``) are covered in tests/compaction,
    the race of a seal with retention (``seal.refused``) in test_seal_race.py."""
    storage_points = [
        p for p in crashpoints.points() if p.split(".")[0] in OPERATIONS and p not in RACE_POINTS
    ]
    assert sorted(POINT_PARAMS) == sorted(storage_points)
    assert len(set(crashpoints.points())) == len(crashpoints.points())


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_child_dies_at_the_crash_point_with_the_crash_exit_code(
    crash_at: Callable[[str], Crash], point: str
) -> None:
    crash = crash_at(point)
    assert crash.returncode == crashpoints.CRASH_EXIT_CODE, crash.stderr
    assert "NO CRASH" not in crash.stdout


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_child_acknowledged_every_append_before_the_crash(
    crash_at: Callable[[str], Crash], point: str
) -> None:
    crash = crash_at(point)
    expected, start = [], HISTORY_END
    for n in CHILD_BATCHES:
        expected.append((start, start + n - 1))
        start += n
    assert crash.acks == expected, crash.stderr


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_committed_manifest_is_the_old_or_the_new_segment_set(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    old, new = OPERATIONS[point.split(".")[0]]
    committed = _committed_names(fs, root)
    assert committed in (old, new)
    assert committed == (new if point.endswith(".after_commit") else old)


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_log_reopens_cleanly_after_the_crash(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    log = _open(fs, root)
    try:
        assert log.recovery.truncated_bytes == 0
        assert log.recovery.lost_acknowledged is False
        assert [s.name for s in log.manifest.segments] == CASES[point][1]
        assert log.high_watermark == log.log_end_offset == CHILD_END
    finally:
        log.close()


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_every_acknowledged_record_is_read_once_in_order_at_its_offset(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    log = _open(fs, root)
    try:
        assert _pairs(log.batches(0)) == _expected_pairs(point)
    finally:
        log.close()


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_out_of_process_reader_sees_every_acknowledged_record_before_recovery(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    view = PartitionReader(fs, root, TOPIC, 0).view()
    assert view.high_watermark == CHILD_END
    assert _pairs(view.batches(0)) == _expected_pairs(point)


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_appends_after_recovery_continue_at_the_next_offset(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    log = _open(fs, root)
    try:
        result = log.append(make_records(_values(CHILD_END, CHILD_END + 3)))
        assert (result.base_offset, result.last_offset) == (CHILD_END, CHILD_END + 2)
        log.roll()
        assert _pairs(log.batches(0)) == [
            *_expected_pairs(point),
            *((o, b"v%d" % o) for o in range(CHILD_END, CHILD_END + 3)),
        ]
    finally:
        log.close()


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_second_reopen_after_the_crash_changes_nothing(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    _open(fs, root).close()
    files = sorted(os.listdir(_partition(root)))
    version = ManifestStore(fs, _partition(root)).latest().version  # type: ignore[union-attr]
    log = _open(fs, root)
    try:
        assert log.recovery.deleted_orphans == []
        assert log.recovery.resealed == []
        assert log.manifest.version == version
        assert _pairs(log.batches(0)) == _expected_pairs(point)
    finally:
        log.close()
    assert sorted(os.listdir(_partition(root))) == files


@pytest.mark.parametrize("point", POINT_PARAMS)
def test_every_live_segment_file_exists_after_recovery(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], point: str
) -> None:
    crash_at(point)
    log = _open(fs, root)
    try:
        for name in log.manifest.names():
            assert _with_indexes(name) <= set(os.listdir(log.path)), name
    finally:
        log.close()


# ---------------------------------------------------------------------- per point


def test_roll_crash_after_the_new_file_deletes_the_orphan_segment_on_open(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("roll.after_new_file")
    assert _exists(root, ARROW_NEW)
    log = _open(fs, root)
    try:
        assert log.recovery.deleted_orphans == [ARROW_NEW]
        assert not (_with_indexes(ARROW_NEW) & set(os.listdir(log.path)))
        assert log.recovery.resealed == []
    finally:
        log.close()


def test_roll_crash_after_the_new_file_leaves_the_old_segment_active(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("roll.after_new_file")
    log = _open(fs, root)
    try:
        assert log.append(make_records([b"next"])).base_offset == CHILD_END
        assert log.manifest.active.name == ARROW_10
    finally:
        log.close()


def test_roll_crash_after_the_commit_seals_the_rolled_segment_on_open(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("roll.after_commit")
    assert not _exists(root, SEALED_10)
    log = _open(fs, root)
    try:
        assert log.recovery.resealed == [SEALED_10]
        assert log.recovery.deleted_orphans == []
        sealed = log.manifest.find(SEALED_10)
        assert sealed is not None
        assert (sealed.base_offset, sealed.next_offset, sealed.records) == (
            SEALED_END,
            CHILD_END,
            CHILD_END - SEALED_END,
        )
    finally:
        log.close()


def test_seal_crash_after_the_write_deletes_the_orphan_and_redoes_the_seal(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("seal.after_write")
    assert _exists(root, SEALED_10)
    log = _open(fs, root)
    try:
        assert log.recovery.deleted_orphans == [SEALED_10]
        assert log.recovery.resealed == [SEALED_10]
        assert _pairs(log.batches(SEALED_END, CHILD_END)) == [
            (o, b"v%d" % o) for o in range(SEALED_END, CHILD_END)
        ]
    finally:
        log.close()


def test_seal_crash_after_the_commit_leaves_the_sealed_arrow_file_for_the_delete_delay(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("seal.after_commit")
    log = _open(fs, root, clock=_at_commit(fs, root))
    try:
        assert log.recovery.deleted_orphans == []
        assert log.recovery.resealed == []
        assert _with_indexes(ARROW_10) <= set(os.listdir(log.path))
        assert log.collect_garbage(orphan_grace_ms=0).deleted == []
    finally:
        log.close()


def test_seal_crash_after_the_commit_sealed_arrow_file_is_collected_after_the_delay(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("seal.after_commit")
    delay_s = TopicConfig().file_delete_delay_ms / 1000
    log = _open(fs, root, clock=lambda: time.time() + delay_s + 1)
    try:
        assert not (_with_indexes(ARROW_10) & set(os.listdir(log.path)))
        assert _pairs(log.batches(0)) == _expected_pairs("seal.after_commit")
    finally:
        log.close()


def test_replace_crash_after_the_write_leaves_the_new_segment_for_the_orphan_grace(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("replace.after_write")
    log = _open(fs, root)
    try:
        assert log.recovery.deleted_orphans == []
        assert _with_indexes(COMPACTED_0) <= set(os.listdir(log.path))
        assert log.collect_garbage(orphan_grace_ms=3_600_000).deleted == []
        assert _with_indexes(COMPACTED_0) <= set(os.listdir(log.path))
    finally:
        log.close()


def test_replace_crash_after_the_write_orphan_is_collected_once_its_grace_is_over(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("replace.after_write")
    log = _open(fs, root)
    try:
        assert set(log.collect_garbage(orphan_grace_ms=0).deleted) == _with_indexes(COMPACTED_0)
        assert not (_with_indexes(COMPACTED_0) & set(os.listdir(log.path)))
        assert _pairs(log.batches(0)) == _expected_pairs("replace.after_write")
    finally:
        log.close()


def test_replace_crash_after_the_commit_leaves_the_replaced_segment_for_the_delete_delay(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("replace.after_commit")
    log = _open(fs, root, clock=_at_commit(fs, root))
    try:
        assert _with_indexes(SEALED_0) <= set(os.listdir(log.path))
        assert log.collect_garbage(orphan_grace_ms=0).deleted == []
    finally:
        log.close()


def test_replace_crash_after_the_commit_replaced_segment_is_collected_after_the_delay(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash]
) -> None:
    crash_at("replace.after_commit")
    delay_s = TopicConfig().file_delete_delay_ms / 1000
    log = _open(fs, root, clock=lambda: time.time() + delay_s + 1)
    try:
        assert not (_with_indexes(SEALED_0) & set(os.listdir(log.path)))
        assert _pairs(log.batches(0)) == _expected_pairs("replace.after_commit")
    finally:
        log.close()


# ---------------------------------------------------------------------- crash in recovery


@pytest.mark.parametrize("second_point", ["seal.after_write", "seal.after_commit"])
def test_crash_while_recovery_redoes_a_seal_still_recovers(
    fs: LocalFileSystem, root: str, crash_at: Callable[[str], Crash], second_point: str
) -> None:
    """The rolled segment a roll crash left is sealed by the next open; kill that too."""
    crash_at("roll.after_commit")
    proc = _run_child(root, second_point, "reopen", [])
    assert proc.returncode == crashpoints.CRASH_EXIT_CODE, proc.stderr
    assert proc.stdout == ""
    log = _open(fs, root)
    try:
        assert [s.name for s in log.manifest.segments] == AFTER_SEAL
        assert _pairs(log.batches(0)) == _expected_pairs(second_point)
        assert log.append(make_records([b"next"])).base_offset == CHILD_END
    finally:
        log.close()


# ---------------------------------------------------------------------- roll inside append


@pytest.mark.parametrize("point", [p for p in POINT_PARAMS if CASES[p][0] == "roll"])
def test_crash_in_a_roll_triggered_by_append_keeps_every_acknowledged_record(
    fs: LocalFileSystem, root: str, point: str
) -> None:
    """With a small segment.bytes the child's first append rolls before it is acknowledged
    (a roll crash: that batch may survive whole or not at all), or rolls and hands the old
    segment to the background sealer (a seal crash: appends acknowledged meanwhile survive)."""
    _write_history(fs, root)
    proc = _run_child(root, point, "append", [4, 4], "segment.bytes=2048")
    assert proc.returncode == crashpoints.CRASH_EXIT_CODE, proc.stderr
    acks = _acks(proc.stdout)
    if point.startswith("roll."):
        assert acks == []
    log = _open(fs, root)
    try:
        got = _pairs(log.batches(0))
        end = HISTORY_END + 8
        everything = [(o, b"v%d" % o) for o in range(end)]
        acked_end = max([HISTORY_END, *(last + 1 for _, last in acks)])
        assert got == everything[: len(got)]
        assert len(got) >= acked_end
        assert len(got) in (HISTORY_END, HISTORY_END + 4, end)
        assert log.log_end_offset == len(got)
        assert log.append(make_records([b"next"])).base_offset == len(got)
    finally:
        log.close()
