"""A broker whose storage root is on object storage (``s3://``): its tail and its cache.

An object store cannot append, so such a broker keeps its active segments in a local
cache directory (``storage.fs.tiered``) and makes appends durable by committing them in
flush rounds to the bucket (``storage.tail``): an embedded broker by creating each round's
object, a cluster broker through etcd (``cluster.tail``). ``open_tail`` builds both for
the broker, and ``attach`` has the partition manager open every log on the tiered
filesystem with the tail.

Cluster mode needs a store whose create-if-absent is atomic across machines (manifests,
topic metadata and round objects are all committed by it): ``check_atomic_create`` refuses
a backend that says it has none, and probes an object store itself (a second create of one
key must fail), so a store that ignores S3's ``If-None-Match`` is refused at start.

Tails of deleted topics (kept under ``<topic>@<topic id>``, ``storage.tail.tail_key``) are
forgotten by the broker that deletes the topic, and by ``forget_deleted_topics``: an
embedded broker's at start, the controller's with each sweep of the round objects.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
import uuid

from sparklog.broker.config import BrokerConfig
from sparklog.broker.partitions import PartitionManager
from sparklog.cluster.etcd import EtcdSettings
from sparklog.errors import ObjectStoreError, SparkLogError, UnknownTopicError
from sparklog.storage import Storage
from sparklog.storage.fs import FileSystem
from sparklog.storage.fs.tiered import TieredFileSystem
from sparklog.storage.tail import BrokerTail, TailStore, gc, topic_of
from sparklog.storage.tail.embedded import EmbeddedTail

log = logging.getLogger(__name__)
PROBE_DIR = ".sparklog-probe"


def default_cache_dir(uri: str, node_id: int) -> str:
    """``<temp dir>/sparklog-cache-<uid>/<digest of the root>-n<node id>``."""
    digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return os.path.join(
        tempfile.gettempdir(), f"sparklog-cache-{os.getuid()}", f"{digest}-n{node_id}"
    )


def check_atomic_create(fs: FileSystem, root: str, uri: str) -> None:
    """Refuse (``ObjectStoreError``) a store whose create-if-absent is not atomic."""
    if not fs.atomic_create:
        raise ObjectStoreError(
            f"{uri}: cluster mode needs a store with an atomic create-if-absent; this "
            f"backend ({type(fs).__name__}) checks then writes, which two brokers can race"
        )
    if fs.supports_append:
        return  # a disk: O_EXCL, atomic by the OS
    probe = fs.join(root, PROBE_DIR, uuid.uuid4().hex)
    try:
        first = fs.create_exclusive(probe, b"1")
        second = fs.create_exclusive(probe, b"2")
    finally:
        fs.delete(probe)
    if not (first and not second):
        raise ObjectStoreError(
            f"{uri}: the object store ignored a conditional write (If-None-Match: *): a "
            "second create of one key succeeded. Cluster mode needs conditional writes "
            "(AWS S3, SeaweedFS 4.18 or later, MinIO, Ceph RGW with them enabled)"
        )


def open_tail(
    config: BrokerConfig, storage: Storage, etcd: EtcdSettings | None
) -> tuple[TieredFileSystem, BrokerTail]:
    """The tiered filesystem and the tail of a broker on object storage."""
    cache = config.cache_dir or default_cache_dir(storage.uri, config.node_id)
    fs = TieredFileSystem(storage.fs, storage.root, cache)
    store: TailStore
    if etcd is not None:
        from sparklog.cluster.tail import EtcdTail

        store = EtcdTail(etcd, config.cluster_name, config.node_id, storage.fs, storage.root)
    else:
        store = EmbeddedTail(storage.fs, storage.root)
    tail = BrokerTail(
        store,
        flush_ms=config.flush_ms,
        flush_bytes=config.flush_bytes,
        timeout_ms=config.tail_timeout_ms,
        max_chunks=config.tail_max_chunks,
    )
    if etcd is None:
        forget_deleted_topics(tail, storage)
    log.info(
        "log on object storage: %s, cache %s, a round every %d ms or %d bytes",
        storage.uri,
        cache,
        config.flush_ms,
        config.flush_bytes,
    )
    return fs, tail


def attach(
    manager: PartitionManager, config: BrokerConfig, etcd: EtcdSettings | None
) -> BrokerTail:
    """Open the tail and make ``manager`` open every log on the tiered filesystem with it."""
    manager.log_fs, manager.tail = open_tail(config, manager.storage, etcd)
    return manager.tail


def collect_rounds(tail: BrokerTail, storage: Storage, config: BrokerConfig) -> list[str]:
    """The controller's sweep of the cluster's round objects (``storage.tail.gc``): those
    no committed chunk in etcd references, older than ``round_gc_delay_ms``."""
    from sparklog.cluster.tail import EtcdTail

    assert isinstance(tail.store, EtcdTail)
    referenced, keys = tail.store.survey()
    forget_deleted_topics(tail, storage, keys)
    return gc.collect_rounds(
        storage.fs,
        storage.root,
        referenced,
        now_ms=int(time.time() * 1000),
        delay_ms=config.round_gc_delay_ms,
    )


def forget_deleted_topics(
    tail: BrokerTail, storage: Storage, keys: set[str] | None = None
) -> list[str]:
    """Forget the tail of every deleted topic: each tail key (``keys``, else the store's)
    whose topic is gone, or has another id now (deleted, then created again). The topic
    metadata is read after the keys, so a topic created since they were read is kept.
    Returns the keys forgotten; a failure is logged and left for the next sweep."""
    gone = []
    for key in sorted(tail.store.topic_keys() if keys is None else keys):
        parsed = topic_of(key)
        if parsed is None:
            continue
        name, topic_id = parsed
        try:
            if storage.topics.get(name).topic_id == topic_id:
                continue
        except UnknownTopicError:
            pass
        try:
            tail.store.forget(key)
        except SparkLogError as e:
            log.warning("the tail of deleted topic %s not forgotten yet: %s", key, e)
            continue
        log.info("forgot the tail of deleted topic %s", key)
        gone.append(key)
    return gone
