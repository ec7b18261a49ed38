"""Readers of a storage root on S3 (the ``s3_server`` fixture: SeaweedFS): they see the log
up to the end of the manifest's sealed prefix, ask nothing for the ``.arrow`` tail a broker
keeps in its own cache, and find the newest manifest or topic version without listing once
they know one (``VersionedFiles``); sealing there writes the Parquet file alone.

Roots are built as a broker with its log on S3 leaves them: a log written on a local disk
with the storage API, then its bucket-side files copied (``tests.support.s3.copy_to_bucket``).
Request budgets are read from the backend's own counters (``S3FileSystem.requests``).
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.errors import OffsetOutOfRangeError
from sparklog.storage import Storage, names
from sparklog.storage.fs import FileSystem
from sparklog.storage.fs.s3 import S3FileSystem
from sparklog.storage.fs.tiered import TieredFileSystem
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.reader import PartitionReader, sealed_end
from sparklog.storage.records import make_records, normalize
from sparklog.storage.sealed import SealedSegment, write_sealed
from sparklog.storage.versioned import VersionedFiles

from ..support.s3 import T0, SeaweedS3, copy_to_bucket, write_log


def _uri(server: SeaweedS3) -> str:
    return f"s3://{server.bucket}/{uuid.uuid4().hex}"


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


@pytest.fixture
def s3_root(
    s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[bytes]]:
    """A root on S3 as a broker leaves it (module docstring) and every value written."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    values = write_log(str(tmp_path / "local"))
    uri = _uri(s3_server)
    copied = copy_to_bucket(str(tmp_path / "local"), uri, s3_server.env())
    assert not [c for c in copied if c.endswith((".arrow", ".index", ".timeindex"))]
    return uri, values


def test_a_reader_sees_the_sealed_prefix_and_nothing_of_the_tail(
    s3_root: tuple[str, list[bytes]],
) -> None:
    """The manifest names a rolled and an active ``.arrow`` segment that are not in the
    bucket: the view ends where the sealed segments end, reads them whole, and offsets
    past that end are out of range - no error for the missing files."""
    uri, values = s3_root
    storage = Storage(uri).require()
    view = storage.reader("t", 0).view()
    kinds = [s.sealed for s in view.manifest.segments]
    assert kinds == [True, True, True, False, False]  # 3 sealed, 1 rolled, the active one
    assert view.high_watermark == sealed_end(view.manifest) == 60 < len(values)
    assert [v for b in view.batches(0) for v in b["value"].to_pylist()] == values[:60]
    assert view.read(59)[0]["value"].to_pylist() == [values[59]]
    assert view.read(60) == []
    with pytest.raises(OffsetOutOfRangeError):
        view.read(61)
    assert view.offset_for_timestamp(T0 + 30_000) == 30
    assert view.offset_for_timestamp(T0 + 70_000) is None  # only in the rolled segment


def test_a_readers_view_asks_three_gets_and_lists_nothing_once_it_knows_the_manifest(
    s3_root: tuple[str, list[bytes]],
) -> None:
    """The first view lists the manifest directory once; every later one is three GETs:
    the next manifest version (404), the known one, the transaction index (404). Nothing
    is asked about the high watermark or the ``.arrow`` segments."""
    uri, _ = s3_root
    fs, root = S3FileSystem.from_uri(uri)
    reader = PartitionReader(fs, root, "t", 0)
    before = fs.requests()
    reader.view()
    assert _delta(before, fs.requests()) == {"LIST": 1, "GET": 2}
    before = fs.requests()
    for _ in range(3):
        assert reader.view().high_watermark == 60
    assert _delta(before, fs.requests()) == {"GET": 9}


def test_a_new_manifest_version_is_found_without_listing(
    s3_root: tuple[str, list[bytes]],
) -> None:
    """A version committed by another writer after a reader looked is found by reading
    forward (v + 1 found, v + 2 missing), not by listing."""
    uri, values = s3_root
    fs, root = S3FileSystem.from_uri(uri)
    reader = PartitionReader(fs, root, "t", 0)
    first = reader.view()
    other, _ = S3FileSystem.from_uri(uri)
    path = names.partition_dir(root, "t", 0)
    ManifestStore(other, path, writer="other").commit(
        lambda m: m.replace([], [], log_start_offset=20)
    )
    before = fs.requests()
    second = reader.view()
    assert second.manifest.version == first.manifest.version + 1
    assert second.log_start_offset == 20
    assert [v for b in second.batches(20) for v in b["value"].to_pylist()] == values[20:60]
    assert _delta(before, fs.requests()).get("LIST", 0) == 0


def test_versions_gone_from_under_a_reader_are_listed_again(s3_server: SeaweedS3) -> None:
    """The remembered version pruned (or its directory deleted and made anew with fewer
    versions): the probe misses it and the directory is listed, giving the right answer."""
    fs, root = S3FileSystem.from_uri(_uri(s3_server), environ=s3_server.env())
    files = VersionedFiles(fs, fs.join(root, "meta"))
    fs.makedirs(files.directory)
    for v in range(3):
        assert files.try_commit(v, b"old %d" % v)
    reader = VersionedFiles(fs, files.directory)
    assert reader.latest() == (2, b"old 2")
    fs.delete_tree(files.directory)  # deleted, then made anew (a topic created again)
    fs.makedirs(files.directory)
    assert files.try_commit(0, b"new 0")
    before = fs.requests()
    assert reader.latest() == (0, b"new 0")
    assert _delta(before, fs.requests())["LIST"] == 1
    before = fs.requests()
    assert reader.latest() == (0, b"new 0")
    assert _delta(before, fs.requests()) == {"GET": 2}


def test_an_empty_directory_is_probed_at_version_zero(s3_server: SeaweedS3) -> None:
    """A directory seen without versions (a partition no broker opened yet, no topic
    defaults) is asked for version 0 next time, one GET, and sees it once it is there."""
    fs, root = S3FileSystem.from_uri(_uri(s3_server), environ=s3_server.env())
    files = VersionedFiles(fs, fs.join(root, "defaults"))
    assert files.latest() is None
    before = fs.requests()
    assert files.latest() is None
    assert _delta(before, fs.requests()) == {"GET": 1}
    other, _ = S3FileSystem.from_uri(f"s3://{root}", environ=s3_server.env())
    assert VersionedFiles(other, files.directory).try_commit(0, b"first")
    assert files.latest() == (0, b"first")


def test_a_reader_far_behind_lists_instead_of_probing_every_version(
    s3_server: SeaweedS3,
) -> None:
    """More than ``MAX_PROBES`` new versions: one listing finds the newest."""
    from sparklog.storage.versioned import MAX_PROBES

    fs, root = S3FileSystem.from_uri(_uri(s3_server), environ=s3_server.env())
    files = VersionedFiles(fs, fs.join(root, "manifest"))
    assert files.try_commit(0, b"0")
    assert files.latest() == (0, b"0")
    for v in range(1, MAX_PROBES + 3):  # written as another process would: not remembered
        assert fs.create_exclusive(files.path(v), b"%d" % v)
    before = fs.requests()
    newest = MAX_PROBES + 2
    assert files.latest() == (newest, b"%d" % newest)
    assert _delta(before, fs.requests()) == {"GET": MAX_PROBES + 1, "LIST": 1}


def _records(n: int) -> pa.RecordBatch:
    return normalize(
        make_records([b"x%d" % i for i in range(n)]),
        base_offset=0,
        now_ms=T0,
        log_append_time=False,
    )


@pytest.mark.parametrize("through", ["s3", "tiered"])
def test_a_segment_sealed_on_s3_is_one_put_and_reads_its_indexes_from_the_footer(
    s3_server: SeaweedS3, tmp_path: Path, through: str
) -> None:
    """Sealing on a root without appends writes the Parquet file alone (one PUT, no
    ``.index``/``.timeindex`` objects), also through a broker's tiered filesystem (its
    cache beside the bucket); reading it builds the indexes from the footer."""
    fs, root = S3FileSystem.from_uri(_uri(s3_server), environ=s3_server.env())
    writer: FileSystem = fs
    if through == "tiered":
        writer = TieredFileSystem(fs, root, str(tmp_path / "cache"))
    writer.makedirs(root)
    name = names.segment_name(0)
    batch = _records(500)
    before = fs.requests()
    stats = write_sealed(writer, root, name, [batch], row_group_rows=100)
    assert _delta(before, fs.requests()) == {"PUT": 1}
    assert fs.listdir(root) == [name]
    assert stats.size_bytes == fs.size(fs.join(root, name))
    seg = SealedSegment(fs, root, name)
    assert len(seg.offset_index) == 5 and seg.indexes_on_disk_valid()
    before = fs.requests()
    got = [v for b in seg.read(250, 260) for v in b["value"].to_pylist()]
    assert got == [b"x%d" % i for i in range(250, 260)]
    assert set(_delta(before, fs.requests())) <= {"RANGED_GET"}


def test_a_brokers_tiered_filesystem_finds_versions_without_listing(
    s3_server: SeaweedS3, tmp_path: Path
) -> None:
    """A broker with its log on S3 reads and commits manifests through its tiered
    filesystem (cache files local, the rest in the bucket): its manifest reads probe the
    bucket as any reader's do, and list nothing once a version is known."""
    fs, root = S3FileSystem.from_uri(_uri(s3_server), environ=s3_server.env())
    tiered = TieredFileSystem(fs, root, str(tmp_path / "cache"))
    store = ManifestStore(tiered, names.partition_dir(root, "t", 0), writer="broker")
    initial = Manifest(0, 0, (SegmentInfo(names.segment_name(0, kind=names.ACTIVE_KIND), 0, None),))
    store.create_initial(initial)
    before = fs.requests()
    for start in (1, 2, 3):
        store.commit(lambda m, s=start: dataclasses.replace(m, log_start_offset=0, writer=str(s)))
        assert store.latest() is not None
    delta = _delta(before, fs.requests())
    assert "LIST" not in delta and delta["CONDITIONAL_PUT"] == 3, delta
