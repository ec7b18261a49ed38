"""An embedded broker's log on object storage (no etcd): records acknowledged through the
tail survive the loss of the broker's cache directory, at the offsets they were given."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from sparklog.storage import names
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records

from .conftest import S3Root


def _values(plog: PartitionLog) -> list[tuple[int, bytes]]:
    out = []
    for b in plog.batches(plog.log_start_offset):
        out += zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)
    return out


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
