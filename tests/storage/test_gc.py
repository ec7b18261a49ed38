from __future__ import annotations

import os
import time

from sparklog.storage import names
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog

from .helpers import records


def _log(fs: LocalFileSystem, root: str, now: list[float]) -> PartitionLog:
    config = TopicConfig.from_mapping({"file.delete.delay.ms": "60000"})
    return PartitionLog.open(fs, root, "t", 0, config, clock=lambda: now[0])


def test_sealed_arrow_file_survives_the_delete_delay(fs: LocalFileSystem, root: str) -> None:
    now = [time.time()]
    log = _log(fs, root, now)
    log.append(records(0, 5))
    log.roll()
    arrow = names.segment_name(0, kind="arrow")
    assert log.collect_garbage().deleted == []
    assert os.path.exists(f"{log.path}/{arrow}")


def test_sealed_arrow_file_is_deleted_after_the_delay(fs: LocalFileSystem, root: str) -> None:
    now = [time.time()]
    log = _log(fs, root, now)
    log.append(records(0, 5))
    log.roll()
    now[0] += 61
    arrow = names.segment_name(0, kind="arrow")
    deleted = log.collect_garbage().deleted
    assert arrow in deleted
    assert names.offset_index_name(arrow) in deleted
    assert not os.path.exists(f"{log.path}/{arrow}")
    assert os.path.exists(f"{log.path}/{names.segment_name(0)}")


def test_live_files_are_never_collected(fs: LocalFileSystem, root: str) -> None:
    now = [time.time()]
    log = _log(fs, root, now)
    log.append(records(0, 5))
    log.roll()
    log.append(records(5, 5))
    now[0] += 10**6
    log.collect_garbage(orphan_grace_ms=0)
    live = log.manifest.names()
    assert live <= set(os.listdir(log.path))
    assert [r for b in log.batches(0) for r in b.column("offset").to_pylist()] == list(range(10))


def test_uncommitted_output_waits_for_the_orphan_grace(fs: LocalFileSystem, root: str) -> None:
    now = [time.time()]
    log = _log(fs, root, now)
    log.append(records(0, 5))
    stray = f"{log.path}/{names.segment_name(0, generation=3)}"
    with open(stray, "wb") as f:
        f.write(b"a compaction job's output, not yet committed")
    assert log.collect_garbage(orphan_grace_ms=3_600_000).deleted == []
    now[0] += 3601
    assert names.segment_name(0, generation=3) in log.collect_garbage(3_600_000).deleted


def test_old_manifest_versions_are_pruned(fs: LocalFileSystem, root: str) -> None:
    now = [time.time()]
    log = _log(fs, root, now)
    for i in range(15):
        log.append(records(i, 1))
        log.roll()
    versions_before = log._store.files.versions()
    assert len(versions_before) > 20
    now[0] += 61
    log.collect_garbage()
    versions = log._store.files.versions()
    assert len(versions) == 10
    assert versions[-1] == versions_before[-1]
