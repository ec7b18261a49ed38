"""``Storage``: one storage root - its filesystem backend, lease backend, topics and
partition logs. The one place that picks backends: ``filesystem_for`` (a path or URI to a
``FileSystem``) and ``Storage.leases`` (the root's ``LeaseStore``).

``uri`` is the root as given (a local path, ``s3://bucket/prefix`` for the S3 backend, or
another ``pyarrow.fs`` URI); ``root`` is the path inside ``fs``. Executors (Spark tasks)
must be given ``executor_root``: the absolute path of a local root, the URI otherwise.

Leases of a root on a local disk live in the root itself (``<root>/.lock``,
``<root>/topics/<topic>/.compaction.lock``). A root elsewhere (an object store, HDFS) keeps
them in a directory of this host derived from its URI, so processes on this host exclude
each other; processes on other hosts are not excluded: that takes cluster mode's leases.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

from sparklog.errors import NoStorageError, ObjectStoreError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.lease import LeaseStore
from sparklog.storage.lease.local import LocalLeaseStore
from sparklog.storage.log import PartitionLog
from sparklog.storage.reader import PartitionReader
from sparklog.storage.topics import TopicStore


def filesystem_for(uri_or_path: str) -> tuple[FileSystem, str]:
    """Pick a backend for a storage root given as a local path or a URI (``s3://…``).

    Returns the backend and the root path inside it.
    """
    if "://" not in uri_or_path or uri_or_path.startswith("file://"):
        path = uri_or_path.removeprefix("file://")
        return LocalFileSystem(), os.path.abspath(path)
    if uri_or_path.startswith("s3://"):
        # S3 through obstore (the s3 extra): its conditional PUT makes create_exclusive
        # atomic across hosts, which pyarrow's S3FileSystem cannot (fs/s3.py)
        try:
            from sparklog.storage.fs.s3 import S3FileSystem
        except ModuleNotFoundError as e:
            if e.name != "obstore":
                raise
            raise ObjectStoreError(
                f"{uri_or_path}: s3:// storage roots need obstore: pip install 'sparklog[s3]'"
            ) from None
        return S3FileSystem.from_uri(uri_or_path)
    import pyarrow.fs as pafs

    from sparklog.storage.fs.arrow import ArrowFileSystem

    fs, path = pafs.FileSystem.from_uri(uri_or_path)
    return ArrowFileSystem(fs), path


class Storage:
    """Entry point to a storage root given as a local path or a ``pyarrow.fs`` URI."""

    def __init__(self, root: str, fs: FileSystem | None = None) -> None:
        self.uri = root
        if fs is None:
            fs, root = filesystem_for(root)
        self.fs = fs
        self.root = root
        self.topics = TopicStore(fs, root)

    def require(self) -> Storage:
        """This storage, if the root holds sparklog storage (a ``topics/`` directory: every
        broker and every topic creation makes one); else ``NoStorageError`` naming the path.
        Readers, jobs and offline tools call it; a broker creates its root instead."""
        reason = ""
        if not self.fs.exists(self.root):
            reason = "the path does not exist"
        elif not self.fs.is_dir(self.root):
            reason = "the path is a file, not a directory"
        elif not self.fs.is_dir(names.topics_dir(self.root)):
            reason = f"the directory has no {names.TOPICS_DIR}/ (no broker or topic was ever here)"
        if reason:
            raise NoStorageError(
                f"{self.uri}: no sparklog storage here: {reason}; give the storage root "
                "(a broker's --data-dir)"
            )
        return self

    def open_log(self, topic: str, partition: int, **kwargs: Any) -> PartitionLog:
        """The writable log of an existing topic's partition (the caller is its only writer)."""
        meta = self.topics.check_partition(topic, partition)
        return PartitionLog.open(self.fs, self.root, topic, partition, meta.config, **kwargs)

    @property
    def leases(self) -> LeaseStore:
        """The lease backend of this root (see the module docstring)."""
        local = self.fs.local_path(self.root)
        if local is None:
            digest = hashlib.sha256(self.uri.encode()).hexdigest()[:16]
            local = os.path.join(tempfile.gettempdir(), f"sparklog-leases-{os.getuid()}", digest)
        return LocalLeaseStore(local)

    @property
    def executor_root(self) -> str:
        """The root as another process must open it (see the module docstring)."""
        return self.root if self.fs.local_path(self.root) is not None else self.uri

    def reader(self, topic: str, partition: int) -> PartitionReader:
        self.topics.check_partition(topic, partition)
        return PartitionReader(self.fs, self.root, topic, partition)
