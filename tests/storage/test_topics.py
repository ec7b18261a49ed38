from __future__ import annotations

import threading

import pytest

from sparklog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from sparklog.storage import Storage
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.topics import TopicStore

from .helpers import records, values


def test_create_then_describe(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    meta = topics.create("orders", 3, {"cleanup.policy": "compact"})
    got = topics.get("orders")
    assert got == meta
    assert got.partitions == 3
    assert got.config.cleanup_policy == "compact"
    assert len(got.topic_id) == 32


def test_metadata_survives_a_new_store(fs: LocalFileSystem, root: str) -> None:
    TopicStore(fs, root).create("orders", 2, {"retention.ms": "1000"})
    assert TopicStore(fs, root).get("orders").config.retention_ms == 1000


def test_list_is_sorted(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    for name in ("b", "a", "c"):
        topics.create(name)
    assert topics.list() == ["a", "b", "c"]


def test_duplicate_create_fails(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    topics.create("orders")
    with pytest.raises(TopicExistsError, match="orders"):
        topics.create("orders")


def test_concurrent_creates_have_one_winner(fs: LocalFileSystem, root: str) -> None:
    wins: list[int] = []
    losses: list[int] = []

    def create(i: int) -> None:
        try:
            TopicStore(fs, root).create("race", i + 1)
            wins.append(i)
        except TopicExistsError:
            losses.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 5
    assert TopicStore(fs, root).get("race").partitions == wins[0] + 1


@pytest.mark.parametrize("name", ["..", "a/b", "x\x00", "y" * 250, "."])
def test_invalid_names_never_touch_the_disk(fs: LocalFileSystem, root: str, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        TopicStore(fs, root).create(name)
    assert fs.listdir(root) in ([], ["topics"])


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
def test_partition_count_is_validated(fs: LocalFileSystem, root: str, partitions: int) -> None:
    """A bad count is its own error (the broker's table answers INVALID_PARTITIONS)."""
    with pytest.raises(InvalidPartitionsError, match="partitions"):
        TopicStore(fs, root).create("t", partitions)


def test_bad_config_creates_nothing(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    with pytest.raises(InvalidConfigError):
        topics.create("t", 1, {"segment.bytes": "1"})
    assert not topics.exists("t")


def test_delete_removes_the_topic_and_its_data(fs: LocalFileSystem, root: str) -> None:
    storage = Storage(root, fs)
    storage.topics.create("t", 1)
    log = storage.open_log("t", 0)
    log.append(records(0, 3))
    log.close()
    storage.topics.delete("t")
    assert storage.topics.list() == []
    with pytest.raises(UnknownTopicError):
        storage.topics.get("t")
    assert fs.listdir(f"{root}/topics") == []


def test_delete_says_how_far_it_is_partition_by_partition(fs: LocalFileSystem, root: str) -> None:
    storage = Storage(root, fs)
    storage.topics.create("t", 3)
    for p in range(3):
        log = storage.open_log("t", p)
        log.append(records(0, 3))
        log.close()
    said: list[tuple[int, int]] = []
    storage.topics.delete("t", progress=lambda done, total: said.append((done, total)))
    assert said == [(1, 3), (2, 3), (3, 3)]
    assert fs.listdir(f"{root}/topics") == []


def test_recreated_topic_starts_empty(fs: LocalFileSystem, root: str) -> None:
    storage = Storage(root, fs)
    first = storage.topics.create("t", 1)
    log = storage.open_log("t", 0)
    log.append(records(0, 3))
    log.close()
    storage.topics.delete("t")
    second = storage.topics.create("t", 1)
    assert second.topic_id != first.topic_id
    assert storage.open_log("t", 0).high_watermark == 0


def test_half_deleted_topic_is_cleaned_up(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    meta = topics.create("t")
    from sparklog.storage.topics import TopicMeta

    deleted = TopicMeta(meta.name, meta.topic_id, 1, meta.config, meta.created_ms, deleted=True)
    topics._commit_next(meta, deleted)  # a crash after the tombstone, before the rmtree
    assert topics.list() == []
    assert fs.listdir(f"{root}/topics") == []


def test_add_partitions(fs: LocalFileSystem, root: str) -> None:
    storage = Storage(root, fs)
    storage.topics.create("t", 1)
    assert storage.topics.add_partitions("t", 3).partitions == 3
    storage.open_log("t", 2).append(records(0, 1))
    with pytest.raises(InvalidPartitionsError):
        storage.topics.add_partitions("t", 2)


def test_alter_configs(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    topics.create("t", 1, {"retention.ms": "5"})
    meta = topics.alter_configs("t", {"cleanup.policy": "compact"})
    assert meta.version == 1
    assert (meta.config.retention_ms, meta.config.cleanup_policy) == (5, "compact")


def test_alter_configs_deletes_back_to_the_default(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    topics.create("t", 1, {"retention.ms": "5", "segment.bytes": "4096"})
    meta = topics.alter_configs("t", {}, ["retention.ms"])
    assert (meta.config.retention_ms, meta.config.segment_bytes) == (604_800_000, 4096)


def test_alter_configs_replacing_resets_what_it_does_not_name(
    fs: LocalFileSystem, root: str
) -> None:
    topics = TopicStore(fs, root)
    topics.create("t", 1, {"retention.ms": "5", "segment.bytes": "4096"})
    meta = topics.alter_configs("t", {"retention.ms": "7"}, replace=True)
    assert (meta.config.retention_ms, meta.config.segment_bytes) == (7, 1024 * 1024 * 1024)


def test_alter_configs_validated_only_commits_nothing(fs: LocalFileSystem, root: str) -> None:
    topics = TopicStore(fs, root)
    topics.create("t", 1)
    assert (
        topics.alter_configs("t", {"retention.ms": "7"}, validate_only=True).config.retention_ms
        == 7
    )
    assert topics.get("t").version == 0
    with pytest.raises(InvalidConfigError, match="retention.ms"):
        topics.alter_configs("t", {"retention.ms": "soon"}, validate_only=True)
    with pytest.raises(InvalidConfigError, match="no.such"):
        topics.alter_configs("t", {}, ["no.such"])


def test_unknown_partition(fs: LocalFileSystem, root: str) -> None:
    storage = Storage(root, fs)
    storage.topics.create("t", 2)
    with pytest.raises(UnknownPartitionError, match="0..1"):
        storage.open_log("t", 2)


def test_storage_reader_reads_a_topic_partition(fs: LocalFileSystem, root: str) -> None:
    storage = Storage(root)
    storage.topics.create("t", 1)
    storage.open_log("t", 0).append(records(0, 4))
    assert values(storage.reader("t", 0).view().batches(0)) == [b"v0", b"v1", b"v2", b"v3"]


def test_dynamic_defaults_reach_topics_without_their_own_and_are_never_copied(
    fs: LocalFileSystem, root: str
) -> None:
    from sparklog.errors import InvalidConfigError

    store = TopicStore(fs, root)
    store.create("plain", 1)
    store.create("own", 1, {"retention.ms": "1000"})
    store.set_defaults({"retention.ms": "7200000"})
    assert store.get("plain").config.retention_ms == 7_200_000
    assert store.get("own").config.retention_ms == 1000
    store.alter_configs("plain", {"segment.bytes": "1048576"})  # an unrelated change
    assert store.get("plain").own_configs == {"segment.bytes": 1048576}
    store.set_defaults({}, ["retention.ms"])
    assert store.get("plain").config.retention_ms == 7 * 24 * 3600 * 1000
    with pytest.raises(InvalidConfigError):
        store.set_defaults({"retention.ms": "-5"})
