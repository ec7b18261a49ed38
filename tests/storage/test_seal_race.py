"""Retention drops a rolled segment while the sealer is sealing it.

A rolled ``.arrow`` segment is as deletable as a sealed one, so retention (another process)
may commit ``DropSegments`` between the sealer's write of the Parquet file and its ``Seal``
commit. The sealer must then skip the segment, never resurrect it, and leave no file
behind; a crash at ``seal.refused`` (the commit refused, the Parquet file not yet deleted)
must recover to retention's segment set with the orphan removed on open. Retention is a
stand-in here (``transforms.DropSegments`` through its own ``ManifestStore``, as the job
commits it); the real job against a held-back sealer is in tests/compaction/test_retention.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from sparklog.storage import crashpoints, names, transforms
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import make_records
from tests.storage.helpers import RACE_POINTS

TOPIC = "t"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _values(start: int, end: int) -> list[bytes]:
    return [b"v%d" % s for s in range(start, end)]


def _drop_through(fs: LocalFileSystem, path: str, name: str) -> Manifest:
    """Stand-in retention: drop every segment up to and including ``name``."""

    def choose(m: Manifest) -> list[SegmentInfo]:
        names_ = [s.name for s in m.segments]
        return list(m.segments[: names_.index(name) + 1]) if name in names_ else []

    return ManifestStore(fs, path, writer="stand-in retention").commit(
        transforms.DropSegments(choose)
    )


def _history(fs: LocalFileSystem, root: str) -> PartitionLog:
    """A log (auto_seal off) with [0,10) sealed, [10,20) rolled and unsealed, 20.. active."""
    log = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig(), auto_seal=False)
    log.append(make_records(_values(0, 10)))
    log.roll()
    log.seal_pending()
    log.append(make_records(_values(10, 20)))
    log.roll()
    log.append(make_records(_values(20, 23)))
    (rolled,) = log.manifest.unsealed_rolled
    assert (rolled.base_offset, rolled.next_offset) == (10, 20)
    return log


def _values_read(log: PartitionLog) -> list[bytes]:
    return [v for b in log.batches(log.log_start_offset) for v in b.column("value").to_pylist()]


def test_the_sealer_skips_a_segment_retention_dropped_before_its_seal(
    fs: LocalFileSystem, root: str
) -> None:
    log = _history(fs, root)
    try:
        _drop_through(fs, log.path, names.segment_name(10, kind=names.ACTIVE_KIND))
        assert log.seal_pending() == []
        assert not os.path.exists(os.path.join(log.path, names.segment_name(10)))
        assert [s.name for s in log.manifest.segments] == [
            names.segment_name(20, kind=names.ACTIVE_KIND)
        ]
        assert _values_read(log) == _values(20, 23)
    finally:
        log.close()


def test_a_seal_refused_because_retention_dropped_the_segment_deletes_its_parquet_file(
    fs: LocalFileSystem, root: str
) -> None:
    log = _history(fs, root)
    arrow_10 = names.segment_name(10, kind=names.ACTIVE_KIND)
    sealed_10 = names.segment_name(10)
    try:
        dropped: list[Manifest] = []
        with crashpoints.hooked(
            "seal.after_write", lambda: dropped.append(_drop_through(fs, log.path, arrow_10))
        ):
            assert log.seal_pending() == []
        assert dropped, "the hook did not run"
        files = set(os.listdir(log.path))
        assert not {sealed_10, names.offset_index_name(sealed_10)} & files
        assert log.manifest.version == dropped[0].version  # the seal committed nothing
        assert log.log_start_offset == 20
        assert _values_read(log) == _values(20, 23)
        log.append(make_records(_values(23, 25)))
        log.roll()
        log.seal_pending()
    finally:
        log.close()
    reopened = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig())
    try:
        assert reopened.manifest.find(arrow_10) is None  # never resurrected
        assert reopened.manifest.find(sealed_10) is None
        assert _values_read(reopened) == _values(20, 25)
    finally:
        reopened.close()


def test_retention_while_the_background_sealer_is_held_back(fs: LocalFileSystem, root: str) -> None:
    """Rolls pile up unsealed behind a held sealer; retention drops them; once released,
    the sealer seals only what is left and reports no failure."""
    config = TopicConfig.from_mapping({"segment.bytes": "4096"})
    log = PartitionLog.open(fs, root, TOPIC, 0, config)
    release = threading.Event()
    try:
        with crashpoints.hooked("seal.before_write", lambda: release.wait(60)):
            for i in range(40):
                log.append(make_records(_values(i * 20, i * 20 + 20)))
            unsealed = log.manifest.unsealed_rolled
            assert len(unsealed) >= 5, "no segment rolled"
            victim = unsealed[-2]
            _drop_through(fs, log.path, victim.name)
            release.set()
            log.wait_sealed()
        assert victim.next_offset is not None
        assert log.refresh().log_start_offset == victim.next_offset
        assert log.manifest.unsealed_rolled == []
        for seg in unsealed[:-1]:
            assert not os.path.exists(os.path.join(log.path, names.segment_name(seg.base_offset)))
        assert _values_read(log) == _values(victim.next_offset, 800)
    finally:
        release.set()
        log.close()


# ---------------------------------------------------------------------- the crash point

_CHILD = textwrap.dedent(
    """
    import sys

    from sparklog.storage import crashpoints, names, transforms
    from sparklog.storage.config import TopicConfig
    from sparklog.storage.fs.local import LocalFileSystem
    from sparklog.storage.log import PartitionLog
    from sparklog.storage.manifest import ManifestStore
    from sparklog.storage.records import make_records

    root = sys.argv[1]
    fs = LocalFileSystem()
    log = PartitionLog.open(fs, root, "t", 0, TopicConfig(), auto_seal=False)
    log.append(make_records([b"v%d" % i for i in range(10, 20)]))
    log.roll()
    rolled = log.manifest.unsealed_rolled[-1].name

    def retention():
        def choose(m):
            names_ = [s.name for s in m.segments]
            return list(m.segments[: names_.index(rolled) + 1])
        ManifestStore(fs, log.path, writer="stand-in retention").commit(
            transforms.DropSegments(choose))

    with crashpoints.hooked("seal.after_write", retention):
        log.seal_pending()
    print("NO CRASH", flush=True)
    """
)


@pytest.fixture(scope="module")
def refused_crash(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A child that died at ``seal.refused``: the storage root it left."""
    fs = LocalFileSystem()
    root = str(tmp_path_factory.mktemp("race") / "data")
    log = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig())
    log.append(make_records(_values(0, 10)))
    log.roll()
    log.close()
    env = {**os.environ, "SPARKLOG_CRASH_AT": "seal.refused", "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, root], env=env, cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == crashpoints.CRASH_EXIT_CODE, proc.stdout + proc.stderr
    return root


def test_every_race_point_is_a_crash_point() -> None:
    assert set(RACE_POINTS) <= set(crashpoints.points())


def test_a_crash_at_seal_refused_leaves_retention_s_segment_set(
    fs: LocalFileSystem, refused_crash: str, root: str
) -> None:
    shutil.copytree(refused_crash, root)
    path = names.partition_dir(root, TOPIC, 0)
    latest = ManifestStore(fs, path).latest()
    assert latest is not None
    assert [s.name for s in latest.segments] == [names.segment_name(20, kind=names.ACTIVE_KIND)]
    assert latest.log_start_offset == 20
    assert os.path.exists(os.path.join(path, names.segment_name(10)))  # the orphan seal
    view = PartitionReader(fs, root, TOPIC, 0).view()
    assert (view.log_start_offset, view.high_watermark) == (20, 20)


def test_the_log_reopens_after_a_crash_at_seal_refused_without_the_orphan(
    fs: LocalFileSystem, refused_crash: str, root: str
) -> None:
    shutil.copytree(refused_crash, root)
    log = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig())
    try:
        assert names.segment_name(10) in log.recovery.deleted_orphans
        assert log.recovery.resealed == []
        assert not os.path.exists(os.path.join(log.path, names.segment_name(10)))
        assert (log.log_start_offset, log.high_watermark) == (20, 20)
        r = log.append(make_records(_values(20, 23)))
        assert (r.base_offset, r.last_offset) == (20, 22)
        assert _values_read(log) == _values(20, 23)
    finally:
        log.close()
    again = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig())
    try:
        assert again.recovery.deleted_orphans == []
    finally:
        again.close()


def test_sparklog_pause_at_holds_a_child_s_sealer_back(tmp_path: Path) -> None:
    """The environment form of the hook, for processes a test or benchmark starts."""
    script = textwrap.dedent(
        """
        import sys, time
        from sparklog.storage.config import TopicConfig
        from sparklog.storage.fs.local import LocalFileSystem
        from sparklog.storage.log import PartitionLog
        from sparklog.storage.records import make_records

        log = PartitionLog.open(LocalFileSystem(), sys.argv[1], "t", 0, TopicConfig())
        log.append(make_records([b"a", b"b"]))
        t0 = time.monotonic()
        log.roll()  # seals before returning
        print(round(time.monotonic() - t0, 3), len(log.manifest.unsealed_rolled))
        log.close()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SPARKLOG_PAUSE_AT": "seal.before_write=400"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")], env=env, cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    took, unsealed = proc.stdout.split()
    assert float(took) >= 0.4 and unsealed == "0"
