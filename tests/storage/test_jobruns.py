"""The last run of a maintenance job per topic (``sparklog.storage.jobruns``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.storage import Storage, jobruns, names


def run(topic: str = "t", job: str = "retention", removed: int = 3) -> jobruns.JobRun:
    return jobruns.JobRun(job, topic, 1_700_000_000_000, 1.5, 2, removed, 10 * removed, 999)


def storage(tmp_path: Path) -> Storage:
    s = Storage(str(tmp_path))
    s.topics.create("t", 1, {})
    return s


def test_a_run_reads_back_as_written(tmp_path: Path) -> None:
    s = storage(tmp_path)
    jobruns.record(s.fs, s.root, run())
    assert jobruns.last(s.fs, s.root, "t", "retention") == run()
    assert jobruns.last(s.fs, s.root, "t", "compaction") is None


def test_the_last_run_replaces_the_one_before(tmp_path: Path) -> None:
    s = storage(tmp_path)
    jobruns.record(s.fs, s.root, run(removed=3))
    jobruns.record(s.fs, s.root, run(removed=0))
    found = jobruns.last(s.fs, s.root, "t", "retention")
    assert found is not None and found.segments_removed == 0


def test_an_unreadable_report_is_no_report(tmp_path: Path) -> None:
    s = storage(tmp_path)
    path = Path(names.job_run_path(s.root, "t", "compaction"))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert jobruns.last(s.fs, s.root, "t", "compaction") is None


def test_a_deleted_topic_gets_no_report(tmp_path: Path) -> None:
    s = Storage(str(tmp_path))  # no topic "t"
    jobruns.record(s.fs, s.root, run())
    assert jobruns.last(s.fs, s.root, "t", "retention") is None
    assert not Path(names.topic_dir(s.root, "t")).exists()


def test_only_known_jobs_have_a_file() -> None:
    with pytest.raises(ValueError, match="unknown job"):
        names.job_run_path("/root", "t", "export")
