"""Collecting round objects (``storage.tail.gc``) on a real S3 server: a round no committed
chunk references is deleted once older than the delay, counted from its number (a cluster
broker's microseconds); referenced rounds, young rounds and an embedded broker's stay."""

from __future__ import annotations

from sparklog.storage import names
from sparklog.storage.tail.gc import collect_rounds

from .conftest import S3Root

NOW_MS = 1_800_000_000_000


def _put(r: S3Root, writer: str, seq: int) -> str:
    rel = f"{names.WAL_DIR}/{writer}/{names.wal_object(seq)}"
    assert r.s3.create_exclusive(r.s3.join(r.root, rel), b"round")
    return rel


def test_only_old_unreferenced_cluster_rounds_are_deleted(s3_root: S3Root) -> None:
    old_ms, young_ms = NOW_MS - 700_000, NOW_MS - 10_000
    orphan = _put(s3_root, "n1", old_ms * 1000)
    kept = _put(s3_root, "n2", old_ms * 1000 + 1)
    young = _put(s3_root, "n1", young_ms * 1000)
    embedded = _put(s3_root, names.EMBEDDED_WRITER, 0)
    deleted = collect_rounds(s3_root.s3, s3_root.root, {kept}, now_ms=NOW_MS, delay_ms=600_000)
    assert deleted == [orphan]
    for rel in (kept, young, embedded):
        assert s3_root.s3.exists(s3_root.s3.join(s3_root.root, rel))
    assert not s3_root.s3.exists(s3_root.s3.join(s3_root.root, orphan))
