"""``Storage``: one storage root - its topics and their partition logs.

``uri`` is the root as given (a local path or a ``pyarrow.fs`` URI); ``root`` is the path
inside ``fs``. Executors (Spark tasks) must be given ``executor_root``: the absolute path of
a local root, the URI otherwise.
"""

from __future__ import annotations

from typing import Any

from sparklog.storage.fs import FileSystem, filesystem_for
from sparklog.storage.log import PartitionLog
from sparklog.storage.reader import PartitionReader
from sparklog.storage.topics import TopicStore


class Storage:
    """Entry point to a storage root given as a local path or a ``pyarrow.fs`` URI."""

    def __init__(self, root: str, fs: FileSystem | None = None) -> None:
        self.uri = root
        if fs is None:
            fs, root = filesystem_for(root)
        self.fs = fs
        self.root = root
        self.topics = TopicStore(fs, root)

    def open_log(self, topic: str, partition: int, **kwargs: Any) -> PartitionLog:
        """The writable log of an existing topic's partition (the caller is its only writer)."""
        meta = self.topics.check_partition(topic, partition)
        return PartitionLog.open(self.fs, self.root, topic, partition, meta.config, **kwargs)

    @property
    def executor_root(self) -> str:
        """The root as another process must open it (see the module docstring)."""
        return self.root if self.fs.local_path(self.root) is not None else self.uri

    def reader(self, topic: str, partition: int) -> PartitionReader:
        self.topics.check_partition(topic, partition)
        return PartitionReader(self.fs, self.root, topic, partition)
