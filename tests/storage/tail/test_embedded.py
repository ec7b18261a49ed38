"""An embedded broker's log on object storage (no etcd): records acknowledged through the
tail survive the loss of the broker's cache directory, at the offsets they were given."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.storage import names, recovery
from sparklog.storage.fs import FileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import ManifestStore
from sparklog.storage.producers import ProducerBatch, ProducerStates
from sparklog.storage.records import make_records

from .conftest import S3Root


def _values(plog: PartitionLog) -> list[tuple[int, bytes]]:
    out = []
    for b in plog.batches(plog.log_start_offset):
        out += zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)
    return out


def _replay(fs: FileSystem, plog: PartitionLog) -> tuple[list[int], ProducerStates]:
    """The producer state a new leader of ``plog`` rebuilds, and where its replay of the
    log started (the offsets ``producer_states`` asked batches from; none: no replay)."""
    replayed_from: list[int] = []

    def batches(start: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
        replayed_from.append(start)
        return plog.batches(start, columns=columns)

    states = recovery.producer_states(
        fs, plog.path, log_start_offset=0, high_watermark=plog.high_watermark,
        batches=batches, manifest=plog.manifest,
    )  # fmt: skip
    return replayed_from, states


def test_acknowledged_records_survive_a_wiped_cache(s3_root: S3Root, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fs = s3_root.tiered(cache)
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
    plog.bump_leader_epoch()
    acked = []
    for i in range(20):
        r = plog.append(make_records([f"v{i}".encode()] * 3))
        acked += [(r.base_offset + k, f"v{i}".encode()) for k in range(3)]
    # the machine is gone: no close, the cache directory deleted
    tail.close()
    shutil.rmtree(cache)
    fs2 = s3_root.tiered(tmp_path / "cache2")
    tail2 = s3_root.embedded_tail()
    try:
        again = PartitionLog.open(fs2, s3_root.root, "t", 0, tail=tail2)
        assert again.high_watermark == 60
        assert _values(again) == acked
        again.close()
    finally:
        tail2.close()


def test_one_object_per_round_for_every_partition(s3_root: S3Root, tmp_path: Path) -> None:
    fs = s3_root.tiered(tmp_path / "cache")
    s3_root.create_topic(fs, "t", partitions=8)
    tail = s3_root.embedded_tail(flush_ms=200)
    logs = [PartitionLog.open(fs, s3_root.root, "t", p, tail=tail) for p in range(8)]
    try:
        threads = [
            threading.Thread(target=lambda p=p: logs[p].append(make_records([b"x"] * 10)))
            for p in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(plog.high_watermark == 10 for plog in logs)
        rounds = s3_root.s3.listdir(names.wal_dir(s3_root.root, names.EMBEDDED_WRITER))
        assert 1 <= len(rounds) <= 2  # appends racing the first cut may land in a second
        assert tail.rounds.stats.chunks == 8
    finally:
        for plog in logs:
            plog.close()
        tail.close()


def test_a_seal_drops_its_chunks_and_their_objects(s3_root: S3Root, tmp_path: Path) -> None:
    fs = s3_root.tiered(tmp_path / "cache")
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
    try:
        for _ in range(5):
            plog.append(make_records([b"y"] * 4))
        wal = names.wal_dir(s3_root.root, names.EMBEDDED_WRITER)
        assert s3_root.s3.listdir(wal)
        plog.roll()  # seals
        assert s3_root.s3.listdir(wal) == []
        assert tail.store.claim("t", 0, -1).entries == []
        sealed = [s for s in plog.manifest.segments if s.sealed]
        assert sealed and s3_root.s3.exists(s3_root.s3.join(plog.path, sealed[0].name))
        plog.append(make_records([b"z"]))
        assert [v for _, v in _values(plog)] == [b"y"] * 20 + [b"z"]
    finally:
        plog.close()
        tail.close()


def test_a_segment_rolls_once_max_chunks_rounds_carried_it(s3_root: S3Root, tmp_path: Path) -> None:
    fs = s3_root.tiered(tmp_path / "cache")
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail(max_chunks=3)
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
    try:
        for i in range(7):  # acks=all: each append is committed in a round of its own
            plog.append(make_records([f"v{i}".encode()]))
        plog.wait_sealed()
        sealed = [s for s in plog.manifest.segments if s.sealed]
        assert [(s.base_offset, s.next_offset) for s in sealed] == [(0, 3), (3, 6)]
        # a take-over would rebuild the active segment from at most max_chunks GETs
        assert len(tail.store.claim("t", 0, -1).entries) <= 3
        assert [v for _, v in _values(plog)] == [f"v{i}".encode() for i in range(7)]
    finally:
        plog.close()
        tail.close()


def test_the_cache_holds_no_manifest_and_the_bucket_no_active_segment(
    s3_root: S3Root, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    fs = s3_root.tiered(cache)
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
    try:
        plog.append(make_records([b"a"]))
        in_bucket = s3_root.s3.listdir(plog.path)
        local = [p.name for p in cache.rglob("*") if p.is_file()]
        assert not [n for n in in_bucket if n.endswith(".arrow")]
        assert names.MANIFEST_DIR in in_bucket
        assert any(n.endswith(".arrow") for n in local)
        assert not any(n.endswith(".json") and "manifest" in n for n in local)
    finally:
        plog.close()
        tail.close()


def _manifest_versions(s3_root: S3Root, plog: PartitionLog) -> list[int]:
    return ManifestStore(s3_root.s3, plog.path).files.versions()


def test_a_roll_puts_nothing_and_its_seal_is_one_manifest_version(
    s3_root: S3Root, tmp_path: Path
) -> None:
    fs = s3_root.tiered(tmp_path / "cache")
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, auto_seal=False)
    try:
        plog.append(make_records([b"a"] * 5))
        before = _manifest_versions(s3_root, plog)
        puts, rounds = s3_root.s3.requests(), tail.rounds.stats.rounds
        plog.roll()
        assert _manifest_versions(s3_root, plog) == before
        assert [s.name for s in plog.manifest.unsealed_rolled] == ["00000000000000000000.arrow"]
        plog.append(make_records([b"b"] * 2))  # into the new active segment
        plog.seal_pending()
        after = s3_root.s3.requests()
        versions = _manifest_versions(s3_root, plog)
        assert versions == [*before, before[-1] + 1]
        committed = ManifestStore(s3_root.s3, plog.path).read(versions[-1])
        assert [(s.base_offset, s.sealed) for s in committed.segments] == [(0, True), (5, False)]
        # the Parquet file and the manifest version, besides the rounds of the appends
        made = {k: after[k] - puts[k] for k in after if after[k] != puts[k]}
        rounds = tail.rounds.stats.rounds - rounds
        assert made.get("PUT", 0) + made.get("CONDITIONAL_PUT", 0) == 2 + rounds, made
        assert [v for _, v in _values(plog)] == [b"a"] * 5 + [b"b"] * 2
    finally:
        plog.close()
        tail.close()


@pytest.mark.parametrize("leader_epoch", [None, 3], ids=["embedded", "take-over"])
def test_a_roll_not_committed_yet_is_found_in_the_tail_after_the_machine_is_gone(
    s3_root: S3Root, tmp_path: Path, leader_epoch: int | None
) -> None:
    cache = tmp_path / "cache"
    fs = s3_root.tiered(cache)
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, auto_seal=False)
    acked = []
    for segment in range(3):  # two rolls kept, never committed: no seal ran
        r = plog.append(make_records([f"s{segment}".encode()] * 4))
        acked += [(r.base_offset + k, f"s{segment}".encode()) for k in range(4)]
        if segment < 2:
            plog.roll()
    assert [s.base_offset for s in ManifestStore(s3_root.s3, plog.path).latest().segments] == [0]
    tail.close()  # the machine is gone: no close, no seal, the cache deleted
    shutil.rmtree(cache)
    tail2 = s3_root.embedded_tail()
    try:
        fs2 = s3_root.tiered(tmp_path / "cache2")
        again = PartitionLog.open(fs2, s3_root.root, "t", 0, tail=tail2, leader_epoch=leader_epoch)
        again.wait_sealed()
        assert again.high_watermark == 12
        assert _values(again) == acked
        segments = [(s.base_offset, s.sealed) for s in again.manifest.segments]
        assert segments[:2] == [(0, True), (4, True)]
        r = again.append(make_records([b"after"]))
        assert r.base_offset == 12
        again.close()
    finally:
        tail2.close()


def test_a_sealed_segment_carries_the_producer_state_a_new_leader_replays_from(
    s3_root: S3Root, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    fs = s3_root.tiered(cache)
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
    plog.append(make_records([b"p"] * 5), producer=ProducerBatch(7, 0, 0, 5))
    plog.roll()  # seals: the footer carries the state at offset 5; no snapshot object
    plog.append(make_records([b"q"] * 2), producer=ProducerBatch(7, 0, 5, 2))
    assert not s3_root.s3.exists(s3_root.s3.join(plog.path, names.PRODUCER_STATE_FILE))
    tail.close()  # the machine is gone
    shutil.rmtree(cache)
    tail2 = s3_root.embedded_tail()
    try:
        fs2 = s3_root.tiered(tmp_path / "cache2")
        again = PartitionLog.open(fs2, s3_root.root, "t", 0, tail=tail2)
        replayed_from, states = _replay(fs2, again)
        assert replayed_from == [5]
        assert states.describe() == again.producers()
        retry = again.append(make_records([b"q"] * 2), producer=ProducerBatch(7, 0, 5, 2))
        assert (retry.duplicate, retry.base_offset) == (True, 5)
        again.close()
    finally:
        tail2.close()


def test_a_new_leader_finds_the_producer_state_in_an_older_footer(
    s3_root: S3Root, tmp_path: Path
) -> None:
    """A segment sealed by the next writer after a crash carries no snapshot (it was in
    the dead writer's memory): the replay after a second crash starts from the newest
    footer that has one, not from the log start."""
    fs = s3_root.tiered(tmp_path / "cache")
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, auto_seal=False)
    plog.append(make_records([b"p"] * 5), producer=ProducerBatch(7, 0, 0, 5))
    plog.roll()
    plog.seal_pending()  # segment 0 sealed, its footer covers offset 5
    plog.append(make_records([b"q"] * 3), producer=ProducerBatch(7, 0, 5, 3))
    plog.roll()  # kept, not sealed: the machine dies
    plog.append(make_records([b"r"] * 2), producer=ProducerBatch(7, 0, 8, 2))
    tail.close()
    for crash in (1, 2):  # the next writer seals segment 5 (no footer), then dies too
        tail = s3_root.embedded_tail()
        fs = s3_root.tiered(tmp_path / f"cache{crash}")
        again = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
        tail.close()
    assert [(s.base_offset, s.sealed) for s in again.manifest.segments][:2] == [
        (0, True),
        (5, True),
    ]
    assert _replay(fs, again)[0] == [5]


def test_the_segment_a_take_over_froze_is_sealed_with_the_producer_state(
    s3_root: S3Root, tmp_path: Path
) -> None:
    """The new leader rebuilt the producer state as the frozen segment ends, so that
    segment's seal carries it in its footer: the take-over after the next one replays
    nothing, where it would otherwise replay from an older footer (or the log start)."""
    tail = s3_root.embedded_tail()
    fs = s3_root.tiered(tmp_path / "cache0")
    s3_root.create_topic(fs, "t")
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, leader_epoch=1)
    plog.append(make_records([b"p"] * 5), producer=ProducerBatch(7, 0, 0, 5))
    tail.close()  # the machine is gone
    tail = s3_root.embedded_tail()
    fs = s3_root.tiered(tmp_path / "cache1")
    second = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, leader_epoch=2)
    second.wait_sealed()  # the frozen segment [0, 5) is sealed in the background
    tail.close()  # gone too
    tail = s3_root.embedded_tail()
    try:
        fs = s3_root.tiered(tmp_path / "cache2")
        third = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, leader_epoch=3)
        assert [(s.base_offset, s.sealed) for s in third.manifest.segments][:1] == [(0, True)]
        replayed_from, states = _replay(fs, third)
        assert replayed_from == []
        assert states.describe() == third.producers()
        retry = third.append(make_records([b"p"] * 5), producer=ProducerBatch(7, 0, 0, 5))
        assert (retry.duplicate, retry.base_offset) == (True, 0)
        third.close()
    finally:
        tail.close()


def test_a_take_over_lists_its_directory_once_and_reads_the_manifest_once(
    s3_root: S3Root, tmp_path: Path
) -> None:
    """The take-over of a partition whose leader's machine is gone: the partition
    directory is listed once (recovery's listing serves the orphan step and the
    transaction-index check), and the latest manifest is read once, before the epoch's
    commit; the versions it commits after that are carried forward, not read back."""
    cache = tmp_path / "cache"
    fs = s3_root.tiered(cache)
    s3_root.create_topic(fs, "t")
    tail = s3_root.embedded_tail()
    plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail, leader_epoch=1)
    plog.append(make_records([b"a"] * 3))
    tail.close()  # the machine is gone
    shutil.rmtree(cache)
    tail2 = s3_root.embedded_tail()
    try:
        fs2 = s3_root.tiered(tmp_path / "cache2")
        before = s3_root.s3.requests()
        again = PartitionLog.open(fs2, s3_root.root, "t", 0, tail=tail2, leader_epoch=2)
        after = s3_root.s3.requests()
        used = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        assert again.high_watermark == 3
        assert used.get("LIST", 0) == 1
        # the manifest's probe (2), the leader-epoch history, the producer snapshot, the
        # transaction index's marker read: 9 before the commits were carried forward
        assert used.get("GET", 0) <= 5
        again.close()
    finally:
        tail2.close()
