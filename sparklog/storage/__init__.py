"""The on-disk format: segments, indexes, checkpoints, manifests, recovery.

``ls`` is the map: ``fs/`` (the filesystem seam), ``lease/`` (the lease seam), ``names``
(every file name), ``records`` (the row schema), ``control`` (attribute bits, transaction
markers), ``active`` (the appendable Arrow segment), ``sealed`` (Parquet segments),
``index`` (sparse offset and time indexes), ``checkpoints``, ``versioned``
(create-if-absent versions), ``manifest`` (the versioned segment set), ``transforms``
(every change to it, named), ``log`` (the single writer), ``durability`` (its group
commit), ``sealing`` (its ``Sealer``), ``epochs`` (its leader epochs), ``producers``
(idempotent-producer state beside the log), ``txnindex`` (the readers' transaction index),
``recovery`` (what opening a log repairs), ``reader`` (reads from any process), ``gc``,
``topics``, ``config`` (topic configs), ``jobruns``, ``owner``, ``crashpoints``, ``store``
(a storage root: picks the backends).
Never networking, never Spark.
"""

from sparklog.storage.config import TopicConfig
from sparklog.storage.fs import FileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import Manifest, SegmentInfo
from sparklog.storage.reader import LogView, PartitionReader
from sparklog.storage.records import RECORD_SCHEMA, AppendResult, make_records
from sparklog.storage.store import Storage, filesystem_for
from sparklog.storage.topics import TopicMeta, TopicStore

__all__ = [
    "RECORD_SCHEMA",
    "AppendResult",
    "FileSystem",
    "LogView",
    "Manifest",
    "PartitionLog",
    "PartitionReader",
    "SegmentInfo",
    "Storage",
    "TopicConfig",
    "TopicMeta",
    "TopicStore",
    "filesystem_for",
    "make_records",
]
