from __future__ import annotations

import dataclasses
import threading

import pytest

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.manifest import (
    CleanMark,
    Manifest,
    ManifestStore,
    SegmentInfo,
    tombstone_horizon,
    updated_marks,
)

from .helpers import offsets, open_log, records


def _initial(store: ManifestStore) -> Manifest:
    active = SegmentInfo(names.segment_name(0, kind="arrow"), 0, None)
    return store.create_initial(Manifest(0, 0, (active,)))


def test_first_commit_is_version_zero(fs: LocalFileSystem, root: str) -> None:
    store = ManifestStore(fs, root)
    m = _initial(store)
    assert m.version == 0
    assert store.latest() == m


def test_commit_creates_the_next_version_and_never_overwrites(
    fs: LocalFileSystem, root: str
) -> None:
    store = ManifestStore(fs, root)
    _initial(store)
    m1 = store.commit(lambda m: dataclasses.replace(m, log_start_offset=0))
    assert m1.version == 1
    assert store.files.versions() == [0, 1]
    assert fs.create_exclusive(store.files.path(1), b"{}") is False
    assert store.read(1) == m1


def test_concurrent_commits_all_land_in_distinct_versions(fs: LocalFileSystem, root: str) -> None:
    store = ManifestStore(fs, root)
    _initial(store)
    seen: list[int] = []

    def bump() -> None:
        for _ in range(10):
            m = ManifestStore(fs, root).commit(lambda m: dataclasses.replace(m))
            seen.append(m.version)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(1, 41))


def test_transform_returning_none_commits_nothing(fs: LocalFileSystem, root: str) -> None:
    store = ManifestStore(fs, root)
    _initial(store)
    assert store.commit(lambda m: None).version == 0
    assert store.files.versions() == [0]


def test_a_commit_on_a_version_read_before_another_commit_is_decided_on_the_latest(
    fs: LocalFileSystem, root: str
) -> None:
    store = ManifestStore(fs, root)
    stale = _initial(store)
    store.commit(lambda m: dataclasses.replace(m, log_start_offset=0, leader_epoch=3))
    seen: list[int] = []

    def bump(m: Manifest) -> Manifest:
        seen.append(m.version)
        return dataclasses.replace(m, leader_epoch=m.leader_epoch + 1)

    got = store.commit(bump, current=stale)
    assert seen == [0, 1]  # tried on the hint, lost version 1, decided again on it
    assert (got.version, got.leader_epoch) == (2, 4)
    assert store.latest() == got


def test_a_transform_that_refuses_the_hint_is_run_again_on_the_latest(
    fs: LocalFileSystem, root: str
) -> None:
    store = ManifestStore(fs, root)
    _initial(store)
    latest = store.commit(lambda m: dataclasses.replace(m, leader_epoch=5))
    stale = store.read(0)

    def only_from_epoch_5(m: Manifest) -> Manifest | None:
        if m.leader_epoch < 5:
            raise CorruptMetadataError("an older epoch")
        return None  # nothing to change

    assert store.commit(only_from_epoch_5, current=stale) == latest


def test_manifest_with_a_gap_between_segments_is_rejected() -> None:
    a = SegmentInfo(names.segment_name(0), 0, 10)
    b = SegmentInfo(names.segment_name(11, kind="arrow"), 11, None)
    with pytest.raises(CorruptMetadataError, match="contiguous"):
        Manifest(0, 0, (a, b)).validate()


def test_manifest_must_end_with_an_active_segment() -> None:
    a = SegmentInfo(names.segment_name(0), 0, 10)
    with pytest.raises(CorruptMetadataError):
        Manifest(0, 0, (a,)).validate()


def test_unreadable_manifest_is_reported_with_its_path(fs: LocalFileSystem, root: str) -> None:
    store = ManifestStore(fs, root)
    _initial(store)
    fs.create_exclusive(store.files.path(1), b"{not json")
    with pytest.raises(CorruptMetadataError, match="00000000000000000001.json"):
        store.latest()


def test_a_writer_picks_up_versions_committed_by_others(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.roll()
    other = ManifestStore(fs, log.path)
    first = log.manifest.segments[0].name
    other.commit(lambda m: m.replace([first], []))  # any transform: see test_transforms
    log.append(records(10, 2))
    assert log.refresh().log_start_offset == 10
    log.roll()
    assert [s.base_offset for s in log.manifest.segments] == [10, 12]


def test_compaction_fields_round_trip_through_json(fs: LocalFileSystem, root: str) -> None:
    store = ManifestStore(fs, root)
    _initial(store)
    sealed = SegmentInfo(names.segment_name(0, generation=2), 0, 10, first_tombstone=7)
    active = SegmentInfo(names.segment_name(10, kind="arrow"), 10, None)
    marks = (CleanMark(5, 1000), CleanMark(10, 2000))
    m = store.commit(lambda m: dataclasses.replace(m, segments=(sealed, active), cleaned=marks))
    again = store.latest()
    assert again == m
    assert again.cleaned == marks
    assert again.segments[0].first_tombstone == 7


def test_manifest_written_before_the_compaction_fields_still_loads() -> None:
    old = (
        b'{"format": 1, "version": 3, "log_start_offset": 0, "committed_ms": 1, "writer": "",'
        b' "segments": [{"name": "00000000000000000000.arrow", "base_offset": 0,'
        b' "next_offset": null, "records": 0, "size_bytes": 0, "min_timestamp": 0,'
        b' "max_timestamp": 0, "created_ms": 0}]}'
    )
    m = Manifest.from_json(old, "old.json")
    assert m.cleaned == ()
    assert m.segments[0].first_tombstone is None


@pytest.mark.parametrize(
    "marks", [(CleanMark(10, 1), CleanMark(10, 2)), (CleanMark(5, 2), CleanMark(10, 1))]
)
def test_cleaned_marks_out_of_order_are_rejected(marks: tuple[CleanMark, ...]) -> None:
    active = SegmentInfo(names.segment_name(0, kind="arrow"), 0, None)
    with pytest.raises(CorruptMetadataError, match="cleaned marks"):
        Manifest(0, 0, (active,), cleaned=marks).validate()


def test_refresh_forgets_open_segments_a_newer_version_dropped(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.roll()
    log.append(records(10, 2))
    first = log.manifest.segments[0].name
    assert offsets(log.batches(0))[:3] == [0, 1, 2]
    assert first in log._sealed_cache
    ManifestStore(fs, log.path).commit(lambda m: m.replace([first], []))
    log.refresh()
    assert first not in log._sealed_cache
    assert offsets(log.batches(10)) == [10, 11]


# ---------------------------------------------------------------------- cleaned marks

NOW = 10_000_000
DAY = 24 * 3600 * 1000


def _active(base: int) -> SegmentInfo:
    return SegmentInfo(names.segment_name(base, kind=names.ACTIVE_KIND), base, None)


def test_tombstone_horizon_is_the_end_of_the_last_mark_older_than_delete_retention() -> None:
    marks = (CleanMark(10, 1000), CleanMark(20, 2000), CleanMark(30, 3000))
    assert tombstone_horizon(marks, now_ms=2500, delete_retention_ms=500) == 20
    assert tombstone_horizon(marks, now_ms=2499, delete_retention_ms=500) == 10
    assert tombstone_horizon(marks, now_ms=999, delete_retention_ms=0) == 0
    assert tombstone_horizon((), now_ms=NOW, delete_retention_ms=0) == 0


def test_marks_gain_one_entry_per_compaction_that_reaches_further() -> None:
    marks = updated_marks((), end_offset=10, now_ms=1000, delete_retention_ms=DAY, first_offset=0)
    assert marks == (CleanMark(10, 1000),)
    marks = updated_marks(
        marks, end_offset=25, now_ms=2000, delete_retention_ms=DAY, first_offset=0
    )
    assert marks == (CleanMark(10, 1000), CleanMark(25, 2000))
    same = updated_marks(marks, end_offset=25, now_ms=3000, delete_retention_ms=DAY, first_offset=0)
    assert same == marks


def test_expired_marks_merge_and_marks_below_the_log_are_dropped() -> None:
    marks = (CleanMark(10, 1000), CleanMark(20, 2000), CleanMark(30, 9000))
    out = updated_marks(
        marks, end_offset=40, now_ms=10_000, delete_retention_ms=5000, first_offset=0
    )
    assert out == (CleanMark(20, 2000), CleanMark(30, 9000), CleanMark(40, 10_000))
    assert tombstone_horizon(out, now_ms=10_000, delete_retention_ms=5000) == 20
    trimmed = updated_marks(
        out, end_offset=40, now_ms=10_000, delete_retention_ms=5000, first_offset=20
    )
    assert trimmed == (CleanMark(30, 9000), CleanMark(40, 10_000))


def test_too_many_marks_merge_into_later_ones_which_only_delays_removal() -> None:
    marks: tuple[CleanMark, ...] = ()
    for i in range(1, 11):
        marks = updated_marks(
            marks, end_offset=i * 10, now_ms=i * 100 + (i % 3), delete_retention_ms=DAY,
            first_offset=0, limit=4,
        )  # fmt: skip
    assert len(marks) == 4
    assert marks[-1] == CleanMark(100, 1001)
    full = [CleanMark(i * 10, i * 100 + (i % 3)) for i in range(1, 11)]
    for m in full:  # every offset's recorded time is the same or later than its true one
        covering = next(c for c in marks if c.end_offset >= m.end_offset)
        assert covering.cleaned_ms >= m.cleaned_ms


def test_a_mark_is_never_older_than_the_previous_one() -> None:
    """Another machine's clock may be behind: the manifest's order must survive."""
    out = updated_marks(
        (CleanMark(10, 5000),), end_offset=20, now_ms=4000, delete_retention_ms=DAY,
        first_offset=0,
    )  # fmt: skip
    assert out == (CleanMark(10, 5000), CleanMark(20, 5000))
    Manifest(1, 0, (_active(0),), cleaned=out).validate()
