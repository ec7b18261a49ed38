"""The FileSystem contract (sparklog.storage.fs), run against every backend.

Backends: ``LocalFileSystem`` on a temp dir, ``ArrowFileSystem`` over pyarrow's local
filesystem on a temp dir, ``ArrowFileSystem`` over pyarrow's in-memory mock filesystem, and
``S3FileSystem`` on a real S3 server (SeaweedFS, the ``s3_server`` fixture) under a prefix of
its own per test. The append tests run on the backends that support appends (not S3).
The last tests run a whole ``PartitionLog`` on ``ArrowFileSystem`` so the seam is exercised
by the real storage code, not only by these unit checks.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from sparklog.storage import names
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs import FileSystem
from sparklog.storage.fs.arrow import ArrowFileSystem
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import make_records

from ..support.s3 import SeaweedS3


@dataclass
class Backend:
    name: str
    fs: FileSystem
    base: str  # an existing, empty directory

    def path(self, *parts: str) -> str:
        return self.fs.join(self.base, *parts)


BACKENDS = ["local", "arrow-local", "arrow-mock"]
#: the append tests' backends (S3 objects cannot be appended to)
appendable = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


def make_backend(name: str, tmp_path: Path, s3: SeaweedS3 | None = None) -> Backend:
    fs: FileSystem
    if name == "s3":
        from sparklog.storage.fs.s3 import S3FileSystem

        assert s3 is not None
        fs, base = S3FileSystem.from_uri(
            f"s3://{s3.bucket}/{uuid.uuid4().hex}/fs", environ=s3.env()
        )
    elif name == "local":
        fs = LocalFileSystem()
        base = str(tmp_path / "fs")
    elif name == "arrow-local":
        fs = ArrowFileSystem(pafs.LocalFileSystem())
        base = str(tmp_path / "fs")
    else:
        fs = ArrowFileSystem(pafs._MockFileSystem())
        base = "bucket/fs"
    fs.makedirs(base)
    return Backend(name, fs, base)


@pytest.fixture(params=[*BACKENDS, "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    yield make_backend(request.param, tmp_path, s3)


# ---------------------------------------------------------------------------- metadata


def test_join_builds_slash_separated_paths(backend: Backend) -> None:
    assert backend.fs.join("a", "b", "c.json") == "a/b/c.json"


def test_missing_file_does_not_exist(backend: Backend) -> None:
    assert not backend.fs.exists(backend.path("nope"))


def test_written_file_exists_with_its_size(backend: Backend) -> None:
    p = backend.path("f")
    backend.fs.write_new(p, b"12345")
    assert backend.fs.exists(p)
    assert backend.fs.size(p) == 5


def test_size_of_missing_file_raises_file_not_found(backend: Backend) -> None:
    with pytest.raises(FileNotFoundError):
        backend.fs.size(backend.path("nope"))


def test_directory_exists(backend: Backend) -> None:
    assert backend.fs.exists(backend.base)


def test_is_dir_tells_directories_from_files_and_missing_paths(backend: Backend) -> None:
    backend.fs.write_new(backend.path("f"), b"x")
    assert backend.fs.is_dir(backend.base)
    assert not backend.fs.is_dir(backend.path("f"))
    assert not backend.fs.is_dir(backend.path("nope"))


def test_listdir_of_missing_directory_is_empty(backend: Backend) -> None:
    assert backend.fs.listdir(backend.path("no", "such", "dir")) == []


def test_listdir_gives_sorted_names_not_paths(backend: Backend) -> None:
    for name in ("b.json", "a.arrow", "c"):
        backend.fs.write_new(backend.path(name), b"x")
    backend.fs.makedirs(backend.path("sub"))
    assert backend.fs.listdir(backend.base) == ["a.arrow", "b.json", "c", "sub"]


def test_listdir_does_not_recurse(backend: Backend) -> None:
    backend.fs.makedirs(backend.path("sub"))
    backend.fs.write_new(backend.path("sub", "inner"), b"x")
    assert backend.fs.listdir(backend.base) == ["sub"]


def test_makedirs_creates_parents(backend: Backend) -> None:
    deep = backend.path("a", "b", "c")
    backend.fs.makedirs(deep)
    assert backend.fs.exists(deep)
    assert backend.fs.listdir(backend.path("a")) == ["b"]


def test_makedirs_of_an_existing_directory_is_a_no_op(backend: Backend) -> None:
    d = backend.path("d")
    backend.fs.makedirs(d)
    backend.fs.write_new(backend.fs.join(d, "keep"), b"x")
    backend.fs.makedirs(d)
    assert backend.fs.listdir(d) == ["keep"]


def test_mtime_ms_is_recent(backend: Backend) -> None:
    p = backend.path("f")
    before = time.time() * 1000
    backend.fs.write_new(p, b"x")
    after = time.time() * 1000
    # a little slack for filesystems with coarse timestamps
    assert before - 2000 <= backend.fs.mtime_ms(p) <= after + 2000


# ---------------------------------------------------------------------------- whole files


def test_write_new_then_read_bytes(backend: Backend) -> None:
    p = backend.path("f")
    data = bytes(range(256)) * 100
    backend.fs.write_new(p, data)
    assert backend.fs.read_bytes(p) == data


def test_read_buffer_is_an_arrow_buffer_of_the_content(backend: Backend) -> None:
    p = backend.path("f")
    backend.fs.write_new(p, b"hello arrow")
    buf = backend.fs.read_buffer(p)
    assert isinstance(buf, pa.Buffer)
    assert buf.to_pybytes() == b"hello arrow"


def test_empty_file_reads_as_empty(backend: Backend) -> None:
    p = backend.path("empty")
    backend.fs.write_new(p, b"")
    assert backend.fs.read_bytes(p) == b""
    assert backend.fs.read_buffer(p).size == 0
    assert backend.fs.size(p) == 0


def test_read_of_missing_file_raises_file_not_found(backend: Backend) -> None:
    """Index and checkpoint loading rely on exactly this exception."""
    with pytest.raises(FileNotFoundError):
        backend.fs.read_bytes(backend.path("nope"))


def test_write_atomic_creates_a_file(backend: Backend) -> None:
    p = backend.path("cp.json")
    backend.fs.write_atomic(p, b'{"a": 1}')
    assert backend.fs.read_bytes(p) == b'{"a": 1}'


def test_write_atomic_replaces_content(backend: Backend) -> None:
    p = backend.path("cp.json")
    backend.fs.write_atomic(p, b"old content, longer than the new")
    backend.fs.write_atomic(p, b"new")
    assert backend.fs.read_bytes(p) == b"new"


def test_write_atomic_leaves_no_temporary_files(backend: Backend) -> None:
    p = backend.path("cp.json")
    backend.fs.write_atomic(p, b"1")
    backend.fs.write_atomic(p, b"2")
    assert backend.fs.listdir(backend.base) == ["cp.json"]


def test_open_output_then_sync_file(backend: Backend) -> None:
    p = backend.path("out")
    with backend.fs.open_output(p) as out:
        out.write(b"part one, ")
        out.write(pa.py_buffer(b"part two"))
    backend.fs.sync_file(p)
    assert backend.fs.read_bytes(p) == b"part one, part two"


def test_open_output_truncates_an_existing_file(backend: Backend) -> None:
    p = backend.path("out")
    backend.fs.write_new(p, b"a much longer old content")
    with backend.fs.open_output(p) as out:
        out.write(b"short")
    assert backend.fs.read_bytes(p) == b"short"


def test_open_input_allows_random_access(backend: Backend) -> None:
    p = backend.path("in")
    data = bytes(range(256)) * 4
    backend.fs.write_new(p, data)
    with backend.fs.open_input(p) as f:
        assert f.size() == len(data)
        assert f.read_at(10, 500) == data[500:510]
        f.seek(1000)
        assert f.read(24) == data[1000:]
        f.seek(3)
        assert f.read(2) == data[3:5]


def test_parquet_written_by_open_output_reads_back_through_open_input(backend: Backend) -> None:
    """What sealing and sealed reads do: a ParquetWriter on open_output, a ParquetFile on
    open_input reading single row groups."""
    p = backend.path("seg.parquet")
    table = pa.table({"offset": pa.array(range(100), pa.int64())})
    with backend.fs.open_output(p) as out:
        pq.write_table(table, out, row_group_size=30)
    backend.fs.sync_file(p)
    f = pq.ParquetFile(backend.fs.open_input(p))
    try:
        assert f.metadata.num_row_groups == 4
        assert f.read_row_group(2).column("offset").to_pylist() == list(range(60, 90))
    finally:
        f.close()


def test_sync_dir_succeeds_on_a_directory(backend: Backend) -> None:
    backend.fs.write_new(backend.path("f"), b"x")
    backend.fs.sync_dir(backend.base)


# ---------------------------------------------------------------------------- create_exclusive


def test_create_exclusive_creates_a_missing_file(backend: Backend) -> None:
    p = backend.path("v0.json")
    assert backend.fs.create_exclusive(p, b"first") is True
    assert backend.fs.read_bytes(p) == b"first"


def test_create_exclusive_refuses_an_existing_file_and_keeps_its_content(
    backend: Backend,
) -> None:
    p = backend.path("v0.json")
    assert backend.fs.create_exclusive(p, b"first") is True
    assert backend.fs.create_exclusive(p, b"second, longer") is False
    assert backend.fs.read_bytes(p) == b"first"


def test_create_exclusive_leaves_no_temporary_files(backend: Backend) -> None:
    p = backend.path("v0.json")
    backend.fs.create_exclusive(p, b"first")
    backend.fs.create_exclusive(p, b"second")
    assert backend.fs.listdir(backend.base) == ["v0.json"]


def test_concurrent_create_exclusive_has_exactly_one_winner(backend: Backend) -> None:
    """The manifest commit primitive: of racing writers exactly one wins, and the file
    holds the winner's content. Many rounds with frequent thread switches, so that a
    check-then-write race shows."""
    threads_per_round, rounds = 8, 40
    if backend.name == "s3":
        # SeaweedFS makes concurrent conditional PUTs of one key wait in steps of about a
        # second (up to 4 s a round here), and no lock of this process is involved anyway:
        # a few rounds do; test_fs_s3.py races processes
        rounds = 4

    def race(p: str) -> list[int]:
        barrier = threading.Barrier(threads_per_round)
        results: dict[int, bool] = {}

        def writer(i: int) -> None:
            barrier.wait()
            results[i] = backend.fs.create_exclusive(p, b"writer %d" % i)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(threads_per_round)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == threads_per_round
        return [i for i, won in results.items() if won]

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for r in range(rounds):
            p = backend.path(f"race-{r}.json")
            winners = race(p)
            assert len(winners) == 1, f"round {r}: writers {winners} all created {p}"
            assert backend.fs.read_bytes(p) == b"writer %d" % winners[0]
    finally:
        sys.setswitchinterval(switch)


# ---------------------------------------------------------------------------- append files


@appendable
def test_open_append_creates_an_empty_file(backend: Backend) -> None:
    p = backend.path("seg.arrow")
    f = backend.fs.open_append(p)
    try:
        assert f.size == 0
    finally:
        f.close()
    assert backend.fs.exists(p)
    assert backend.fs.size(p) == 0


@appendable
def test_append_write_returns_bytes_written_and_grows_size(backend: Backend) -> None:
    f = backend.fs.open_append(backend.path("seg.arrow"))
    try:
        assert f.write(b"abc") == 3
        assert f.write(memoryview(b"defg")) == 4
        assert f.write(pa.py_buffer(b"hi")) == 2
        assert f.size == 9
    finally:
        f.close()


@appendable
def test_write_parts_appends_the_parts_in_order(backend: Backend) -> None:
    p = backend.path("seg.arrow")
    f = backend.fs.open_append(p)
    try:
        f.write(b"head:")
        big = bytes(range(256)) * 4096  # 1 MiB: writev may take it in pieces
        assert f.write_parts([b"abc", pa.py_buffer(big), memoryview(b"xyz")]) == 6 + len(big)
        assert f.size == 5 + 6 + len(big)
        f.sync()
        assert backend.fs.read_buffer(p).to_pybytes() == b"head:abc" + big + b"xyz"
    finally:
        f.close()


@appendable
def test_appended_bytes_are_readable_after_sync(backend: Backend) -> None:
    """The active segment is written through open_append and read (by the same process and
    by others) through read_buffer while the append file stays open."""
    p = backend.path("seg.arrow")
    f = backend.fs.open_append(p)
    try:
        f.write(b"header..")
        f.write(b"frame one")
        f.sync()
        assert backend.fs.read_bytes(p) == b"header..frame one"
        assert backend.fs.size(p) == 17
    finally:
        f.close()


@appendable
def test_appended_bytes_are_readable_after_close(backend: Backend) -> None:
    p = backend.path("seg.arrow")
    f = backend.fs.open_append(p)
    f.write(b"abc")
    f.close()
    assert backend.fs.read_bytes(p) == b"abc"


@appendable
def test_append_truncate_shrinks_and_writes_continue_at_the_new_end(backend: Backend) -> None:
    p = backend.path("seg.arrow")
    f = backend.fs.open_append(p)
    try:
        f.write(b"good frames|torn tail")
        f.truncate(11)
        assert f.size == 11
        f.write(b"+next")
        assert f.size == 16
    finally:
        f.close()
    assert backend.fs.read_bytes(p) == b"good frames+next"


@appendable
def test_append_truncate_to_zero_empties_the_file(backend: Backend) -> None:
    """How the active segment's index files are rewritten after recovery."""
    p = backend.path("seg.arrow.index")
    f = backend.fs.open_append(p)
    try:
        f.write(b"stale index")
        f.truncate(0)
        f.write(b"new")
    finally:
        f.close()
    assert backend.fs.read_bytes(p) == b"new"


@appendable
def test_reopened_append_file_continues_at_the_end(backend: Backend) -> None:
    p = backend.path("seg.arrow")
    backend.fs.write_new(p, b"existing")
    f = backend.fs.open_append(p)
    try:
        assert f.size == 8
        f.write(b"+more")
        assert f.size == 13
    finally:
        f.close()
    assert backend.fs.read_bytes(p) == b"existing+more"


@appendable
def test_append_close_twice_is_harmless(backend: Backend) -> None:
    f = backend.fs.open_append(backend.path("seg.arrow"))
    f.write(b"x")
    f.close()
    f.close()


# ---------------------------------------------------------------------------- deletion


def test_delete_removes_a_file(backend: Backend) -> None:
    p = backend.path("f")
    backend.fs.write_new(p, b"x")
    backend.fs.delete(p)
    assert not backend.fs.exists(p)
    assert backend.fs.listdir(backend.base) == []


def test_delete_of_missing_file_is_not_an_error(backend: Backend) -> None:
    backend.fs.delete(backend.path("nope"))


def test_delete_tree_removes_everything_below(backend: Backend) -> None:
    top = backend.path("topic")
    backend.fs.makedirs(backend.fs.join(top, "0", "manifest"))
    backend.fs.write_new(backend.fs.join(top, "0", "manifest", "v.json"), b"x")
    backend.fs.write_new(backend.fs.join(top, "0", "seg"), b"x")
    backend.fs.delete_tree(top)
    assert not backend.fs.exists(top)
    assert backend.fs.listdir(backend.base) == []


def test_delete_tree_of_missing_directory_is_not_an_error(backend: Backend) -> None:
    backend.fs.delete_tree(backend.path("no", "such"))


# ---------------------------------------------------------------------------- a whole log


@appendable
def test_backends_support_append(backend: Backend) -> None:
    assert backend.fs.supports_append is True


def _batch(i: int) -> pa.RecordBatch:
    n = 20
    return make_records(
        [b"value-%d-%d" % (i, j) for j in range(n)],
        keys=[None if j % 5 == 0 else b"k%d" % j for j in range(n)],
        timestamps=[1_000 + (i * 7 + j * 13) % 50 for j in range(n)],
    )


@pytest.mark.parametrize("name", ["arrow-local", "arrow-mock"])
def test_partition_log_runs_on_arrow_filesystem(name: str, tmp_path: Path) -> None:
    """Append (rolling by size, sealing automatically), roll, read, reopen and read again,
    in-process and out-of-process, all through ArrowFileSystem."""
    b = make_backend(name, tmp_path)
    root = b.path("data")
    cfg = TopicConfig.from_mapping({"segment.bytes": "2048", "index.interval.bytes": "512"})
    batches = [_batch(i) for i in range(8)]
    expected = [(o, v) for o, v in enumerate(v for bt in batches for v in bt["value"].to_pylist())]

    def contents(bs: Iterator[pa.RecordBatch]) -> list[tuple[int, bytes]]:
        return [
            (o, v)
            for x in bs
            for o, v in zip(x["offset"].to_pylist(), x["value"].to_pylist(), strict=True)
        ]

    log = PartitionLog.open(b.fs, root, "t", 0, cfg, row_group_rows=7)
    for bt in batches:
        log.append(bt)
    log.roll()
    log.append(_batch(99))
    expected += [(160 + j, v) for j, v in enumerate(_batch(99)["value"].to_pylist())]
    assert log.high_watermark == 180
    assert contents(log.batches(0)) == expected
    log.close()

    log = PartitionLog.open(b.fs, root, "t", 0, cfg, row_group_rows=7)
    try:
        segments = log.manifest.segments
        assert len(segments) > 2
        assert all(s.sealed for s in segments[:-1])
        sealed = b.fs.join(log.path, segments[0].name)
        assert pq.ParquetFile(b.fs.open_input(sealed)).metadata.num_row_groups >= 2
        assert log.high_watermark == 180
        assert contents(log.batches(0)) == expected
        assert contents(log.read(45, max_bytes=2**30)) == expected[45:]
        assert contents(PartitionReader(b.fs, root, "t", 0).view().batches(0)) == expected
        assert log.offset_for_timestamp(1_049) is not None
    finally:
        log.close()


@pytest.mark.parametrize("name", ["arrow-local", "arrow-mock"])
def test_partition_log_on_arrow_filesystem_serves_the_active_segment_before_close(
    name: str, tmp_path: Path
) -> None:
    """Durable appends to the active segment are readable while the log stays open."""
    b = make_backend(name, tmp_path)
    log = PartitionLog.open(b.fs, b.path("data"), "t", 0)
    try:
        log.append(_batch(0))
        log.append(_batch(1))
        got = [v for x in log.batches(0) for v in x["value"].to_pylist()]
        assert got == _batch(0)["value"].to_pylist() + _batch(1)["value"].to_pylist()
        assert names.parse_segment_name(log.manifest.active.name) is not None
    finally:
        log.close()
