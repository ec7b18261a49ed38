"""Fixtures of the tail tests: a storage root in the real S3 server, a broker's tiered view
of it with a local cache directory, and an embedded broker's tail over it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparklog.storage.fs import FileSystem
from sparklog.storage.fs.s3 import S3FileSystem
from sparklog.storage.fs.tiered import TieredFileSystem
from sparklog.storage.tail import BrokerTail
from sparklog.storage.tail.embedded import EmbeddedTail
from sparklog.storage.topics import TopicStore

from ...support.s3 import SeaweedS3


@dataclass
class S3Root:
    """A storage root in the bucket, and the S3 backend that reaches it."""

    s3: S3FileSystem
    root: str
    uri: str

    def tiered(self, cache_dir: Path) -> TieredFileSystem:
        return TieredFileSystem(self.s3, self.root, str(cache_dir))

    def embedded_tail(
        self, flush_ms: int = 10, timeout_ms: int = 10_000, max_chunks: int = 256
    ) -> BrokerTail:
        return BrokerTail(
            EmbeddedTail(self.s3, self.root),
            flush_ms=flush_ms,
            flush_bytes=8 << 20,
            timeout_ms=timeout_ms,
            max_chunks=max_chunks,
        )

    def create_topic(self, fs: FileSystem, name: str, partitions: int = 1) -> None:
        TopicStore(fs, self.root).create(name, partitions)


@pytest.fixture
def s3_root(s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Root]:
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    prefix = uuid.uuid4().hex
    fs, root = S3FileSystem.from_uri(f"s3://{s3_server.bucket}/{prefix}")
    yield S3Root(fs, root, f"s3://{s3_server.bucket}/{prefix}")
