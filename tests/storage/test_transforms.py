"""The named manifest transforms (``sparklog.storage.transforms``), committed by a process
that is not the log's writer, as the retention and compaction jobs commit them; the writer
picks the new version up with ``refresh``."""

from __future__ import annotations

import dataclasses
import itertools

import pyarrow.compute as pc
import pytest

from sparklog.errors import LeaseLostError, SegmentNotLiveError
from sparklog.storage import names, transforms
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.sealed import write_sealed

from .helpers import offsets, open_log, records, values


def _job(log: PartitionLog) -> ManifestStore:
    """The manifest store a job in another process would open."""
    return ManifestStore(log.fs, log.path, writer="test-job")


def _swap_whole(log: PartitionLog, inputs: list[str], outputs: list) -> transforms.Compact:
    return transforms.Compact(tuple(inputs), tuple(outputs), 10, 1_000, 0)


def test_compact_swaps_in_a_compacted_segment(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.roll()
    old = log.manifest.segments[0]
    even = [b.filter(pc.equal(pc.bit_wise_and(b.column("offset"), 1), 0)) for b in log.batches(0)]
    name = names.segment_name(0, generation=1)
    stats = write_sealed(fs, log.path, name, even)
    new = dataclasses.replace(old, name=name, records=stats.records, size_bytes=stats.size_bytes)
    _job(log).commit(_swap_whole(log, [old.name], [new]))
    log.refresh()
    assert offsets(log.batches(0)) == [0, 2, 4, 6, 8]
    assert values(log.batches(0)) == [b"v0", b"v2", b"v4", b"v6", b"v8"]
    assert log.high_watermark == 10


def test_compact_records_when_the_section_was_cleaned(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.roll()
    old = log.manifest.segments[0]
    committed = _job(log).commit(transforms.Compact((old.name,), (old,), 10, 1_234, 0))
    assert [(c.end_offset, c.cleaned_ms) for c in committed.cleaned] == [(10, 1_234)]


def test_compact_of_a_segment_no_longer_live_fails(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.roll()
    old = log.manifest.segments[0]
    _job(log).commit(transforms.DropSegments(lambda m: [m.segments[0]]))
    with pytest.raises(SegmentNotLiveError, match=old.name):
        _job(log).commit(_swap_whole(log, [old.name], []))


def test_dropping_a_prefix_advances_the_log_start(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.roll()
    log.append(records(10, 5))
    _job(log).commit(transforms.DropSegments(lambda m: [m.segments[0]]))
    log.refresh()
    assert log.log_start_offset == 10
    assert offsets(log.batches(10)) == list(range(10, 15))


def test_dropping_nothing_commits_nothing(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    before = log.manifest.version
    assert _job(log).commit(transforms.DropSegments(lambda m: [])).version == before


def test_delete_records_moves_the_log_start_up_only(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    assert log.delete_records(6) == 6
    version = log.manifest.version
    assert log.delete_records(3) == 6 and log.manifest.version == version
    assert offsets(log.batches(6)) == [6, 7, 8, 9]


def test_each_leader_epoch_is_committed_to_the_manifest(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    first = log.bump_leader_epoch()
    second = log.bump_leader_epoch()
    assert second == first + 1
    assert log.manifest.leader_epoch == second
    assert ManifestStore(fs, log.path).latest().leader_epoch == second  # type: ignore[union-attr]
    assert [e for e, _ in log.epochs.leader_epochs()] == [first, second]


def test_an_older_leader_epoch_is_fenced(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    epoch = log.bump_leader_epoch()
    store = _job(log)
    store.commit(transforms.EpochChange(epoch + 5, "t-0"))  # a newer leader took over
    with pytest.raises(LeaseLostError, match="fenced"):
        store.commit(transforms.EpochChange(epoch + 1, "t-0"))
    assert store.commit(transforms.EpochChange(epoch + 5)).leader_epoch == epoch + 5


def test_an_old_writers_commits_are_refused_after_a_newer_epoch(
    fs: LocalFileSystem, root: str
) -> None:
    old = open_log(fs, root)
    epoch = old.bump_leader_epoch()
    old.append(records(0, 5))
    _job(old).commit(transforms.EpochChange(epoch + 1, "t-0"))  # a new leader took over
    with pytest.raises(LeaseLostError, match=f"epoch {epoch} is fenced"):
        old.roll()
    with pytest.raises(LeaseLostError):
        old.delete_records(2)
    assert ManifestStore(fs, old.path).latest().log_start_offset == 0  # type: ignore[union-attr]


def _rolls(bases: list[int]) -> tuple[transforms.Roll, ...]:
    """Rolls from a segment at bases[0] through each next base (names of active segments)."""
    out = []
    for base, nxt in itertools.pairwise(bases):
        rolled = SegmentInfo(names.segment_name(base, kind=names.ACTIVE_KIND), base, nxt)
        active = SegmentInfo(names.segment_name(nxt, kind=names.ACTIVE_KIND), nxt, None)
        out.append(transforms.Roll(rolled, active))
    return tuple(out)


def test_rolls_carried_by_a_commit_skip_those_already_in_the_manifest() -> None:
    """``Rolled`` lays kept rolls over a version: one committed meanwhile (by a deposed
    leader's seal, or a take-over that found it in the tail) is skipped, not redone."""
    first = SegmentInfo(names.segment_name(0, kind=names.ACTIVE_KIND), 0, None)
    m0 = Manifest(0, 0, (first,))
    rolls = _rolls([0, 5, 9])
    assert [s.base_offset for s in transforms.Rolled(rolls)(m0).segments] == [0, 5, 9]
    m1 = rolls[0](m0)  # the first roll is in the manifest already
    again = transforms.Rolled(rolls)(m1)
    assert again is not None
    assert [(s.base_offset, s.next_offset) for s in again.segments] == [(0, 5), (5, 9), (9, None)]
    assert transforms.Rolled(rolls)(again) is None  # nothing left to commit
    sealed = transforms.Rolled(rolls[:1], transforms.DeleteRecords(3))(m0)
    assert sealed is not None
    assert (sealed.log_start_offset, len(sealed.segments)) == (3, 2)
