"""The round writer (``storage.tail.rounds``) against a real S3 server reached through a
proxy the test controls: a failed round is cut again and committed in order, an append
that cannot be committed in time fails with TailUnavailableError, and a second embedded
writer of one root is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sparklog.errors import ForeignWriterError, TailUnavailableError
from sparklog.storage.fs.s3 import S3FileSystem
from sparklog.storage.fs.tiered import TieredFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records
from sparklog.storage.tail import BrokerTail
from sparklog.storage.tail.embedded import EmbeddedTail
from sparklog.storage.topics import TopicStore
from sparklog_testkit.s3proxy import S3FaultProxy

from ...support.s3 import SeaweedS3
from .conftest import S3Root


def _through(proxy: S3FaultProxy, s3_root: S3Root) -> S3FileSystem:
    """The root's bucket, reached through ``proxy``."""
    return S3FileSystem(s3_root.s3.bucket, endpoint=proxy.endpoint)


def test_a_failed_round_is_cut_again_and_nothing_is_lost(
    s3_root: S3Root, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    with S3FaultProxy(s3_server.endpoint) as proxy:
        s3 = _through(proxy, s3_root)
        fs = TieredFileSystem(s3, s3_root.root, str(tmp_path / "cache"))
        TopicStore(fs, s3_root.root).create("t", 1)
        tail = BrokerTail(EmbeddedTail(s3, s3_root.root), flush_ms=5, flush_bytes=1 << 20,
                          timeout_ms=20_000)  # fmt: skip
        plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
        try:
            proxy.error(503, methods=["PUT"])  # every round fails, past the client's retries
            appended = plog.append(make_records([b"a"] * 5), durable=False)
            future = plog.durable_future(appended.last_offset + 1)
            time.sleep(2)
            assert not future.done() and tail.rounds.stats.failures > 0
            proxy.pass_through()
            future.result(20)
            assert plog.high_watermark == 5
        finally:
            plog.close()
            tail.close()
    fresh = s3_root.tiered(tmp_path / "fresh")
    again_tail = s3_root.embedded_tail()
    again = PartitionLog.open(fresh, s3_root.root, "t", 0, tail=again_tail)
    try:
        assert again.high_watermark == 5
    finally:
        again.close()
        again_tail.close()


def test_an_append_not_committed_in_time_times_out(
    s3_root: S3Root, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    with S3FaultProxy(s3_server.endpoint) as proxy:
        s3 = _through(proxy, s3_root)
        fs = TieredFileSystem(s3, s3_root.root, str(tmp_path / "cache"))
        TopicStore(fs, s3_root.root).create("t", 1)
        tail = BrokerTail(EmbeddedTail(s3, s3_root.root), flush_ms=5, flush_bytes=1 << 20,
                          timeout_ms=1500)  # fmt: skip
        plog = PartitionLog.open(fs, s3_root.root, "t", 0, tail=tail)
        try:
            proxy.stall()
            began = time.monotonic()
            with pytest.raises(Exception) as e:
                plog.append(make_records([b"a"]))
            assert isinstance(getattr(e.value, "cause", e.value), TailUnavailableError), e.value
            assert time.monotonic() - began < 10
            proxy.pass_through()
        finally:
            plog.abandon(RuntimeError("test over"))
            tail.close()


def test_a_second_embedded_writer_of_one_root_is_refused(s3_root: S3Root, tmp_path: Path) -> None:
    fs = s3_root.tiered(tmp_path / "a")
    s3_root.create_topic(fs, "t")
    first_tail, second_tail = s3_root.embedded_tail(), s3_root.embedded_tail()
    first = PartitionLog.open(fs, s3_root.root, "t", 0, tail=first_tail)
    second = PartitionLog.open(s3_root.tiered(tmp_path / "b"), s3_root.root, "t", 0,
                               tail=second_tail)  # fmt: skip
    try:
        second.append(make_records([b"second"]))  # round 0 is the second's
        with pytest.raises(Exception) as e:
            first.append(make_records([b"first"]))  # round 0 again: another writer's
        assert isinstance(getattr(e.value, "cause", e.value), ForeignWriterError), e.value
    finally:
        for log in (first, second):
            log.abandon(RuntimeError("test over"))
        first_tail.close()
        second_tail.close()
