"""Topics: names, partition counts and configs, stored durably under the storage root.

Format: ``<root>/topics/<topic>/meta/<version>.json``, versioned and committed by
create-if-absent like the manifest (``VersionedFiles``)::

    {"format": 1, "name": "orders", "topic_id": "<uuid4 hex>", "partitions": 6,
     "configs": {"cleanup.policy": "compact"}, "created_ms": ..., "deleted": false}

``configs`` holds only non-default values (defaults can then evolve). Creating a topic
commits version 0 (so two concurrent creators cannot both win); changing partitions or
configs commits the next version. Deleting commits a version with ``"deleted": true`` and
then removes the topic directory; a topic whose latest version says deleted is absent, and
its directory is removed by the next ``TopicStore`` that sees it (a crash mid-delete).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.errors import (
    CorruptMetadataError,
    InvalidConfigError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from sparklog.storage import names
from sparklog.storage.config import CONFIG_NAMES, TopicConfig
from sparklog.storage.fs import FileSystem
from sparklog.storage.versioned import VersionedFiles

FORMAT = 1
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class TopicMeta:
    """One committed version of a topic's metadata."""

    name: str
    topic_id: str
    partitions: int
    config: TopicConfig = field(default_factory=TopicConfig)
    created_ms: int = 0
    version: int = 0
    deleted: bool = False

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "name": self.name,
                "topic_id": self.topic_id,
                "partitions": self.partitions,
                "configs": self.config.non_defaults(),
                "created_ms": self.created_ms,
                "deleted": self.deleted,
            },
            indent=1,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int, where: str) -> TopicMeta:
        try:
            d = json.loads(data)
            if d.get("format") != FORMAT:
                raise CorruptMetadataError(f"{where}: unknown topic format {d.get('format')}")
            return cls(
                name=str(d["name"]),
                topic_id=str(d["topic_id"]),
                partitions=int(d["partitions"]),
                config=TopicConfig.from_mapping(d.get("configs") or {}),
                created_ms=int(d.get("created_ms", 0)),
                version=version,
                deleted=bool(d.get("deleted", False)),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where}: unreadable topic metadata: {e}") from e


def _check_partitions(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
        raise InvalidConfigError(
            f"partitions must be an integer in [1, {MAX_PARTITIONS}], got {n!r}"
        )
    return n


class TopicStore:
    """Create, list, describe, alter and delete topics under a storage root."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root

    def _files(self, name: str) -> VersionedFiles:
        return VersionedFiles(self.fs, names.topic_meta_dir(self.root, name))

    def _latest(self, name: str) -> TopicMeta | None:
        files = self._files(name)
        found = files.latest()
        if found is None:
            return None
        version, data = found
        return TopicMeta.from_json(data, version, files.path(version))

    def create(
        self, name: str, partitions: int = 1, configs: Mapping[str, Any] | None = None
    ) -> TopicMeta:
        names.validate_topic_name(name)
        _check_partitions(partitions)
        config = TopicConfig.from_mapping(configs)
        files = self._files(name)
        latest = self._latest(name)
        if latest is not None and not latest.deleted:
            raise TopicExistsError(f"topic {name!r} already exists")
        if latest is not None:
            self._remove_dir(name)
        meta = TopicMeta(name, uuid.uuid4().hex, partitions, config, int(time.time() * 1000))
        self.fs.makedirs(files.directory)
        if not files.try_commit(0, meta.to_json()):
            raise TopicExistsError(f"topic {name!r} already exists (created concurrently)")
        return meta

    def get(self, name: str) -> TopicMeta:
        names.validate_topic_name(name)
        meta = self._latest(name)
        if meta is None or meta.deleted:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return meta

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownTopicError:
            return False
        return True

    def list(self) -> list[str]:
        out = []
        for name in self.fs.listdir(names.topics_dir(self.root)):
            try:
                names.validate_topic_name(name)
            except ValueError:
                continue
            meta = self._latest(name)
            if meta is None:
                continue
            if meta.deleted:
                self._remove_dir(name)
                continue
            out.append(name)
        return out

    def _commit_next(self, current: TopicMeta, new: TopicMeta) -> TopicMeta:
        new = TopicMeta(
            new.name,
            new.topic_id,
            new.partitions,
            new.config,
            new.created_ms,
            current.version + 1,
            new.deleted,
        )
        if not self._files(current.name).try_commit(new.version, new.to_json()):
            raise CorruptMetadataError(
                f"topic {current.name!r} was changed concurrently (version {new.version})"
            )
        return new

    def alter_configs(
        self,
        name: str,
        configs: Mapping[str, Any] | None = None,
        delete: Iterable[str] = (),
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> TopicMeta:
        """Set ``configs`` and return ``delete``d names to their defaults, as the next
        version; with ``replace`` every config not in ``configs`` returns to its default
        (Kafka's AlterConfigs). Names and values are checked first (InvalidConfigError);
        with ``validate_only`` nothing is committed."""
        meta = self.get(name)
        current = {} if replace else meta.config.non_defaults()
        for key in delete:
            if key not in CONFIG_NAMES:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            current.pop(key, None)
        config = TopicConfig.from_mapping({**current, **dict(configs or {})})
        new = TopicMeta(meta.name, meta.topic_id, meta.partitions, config, meta.created_ms)
        return new if validate_only else self._commit_next(meta, new)

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.get(name)
        _check_partitions(total)
        if total <= meta.partitions:
            raise InvalidConfigError(
                f"topic {name!r} has {meta.partitions} partitions; the new count {total} "
                "must be larger"
            )
        return self._commit_next(
            meta, TopicMeta(meta.name, meta.topic_id, total, meta.config, meta.created_ms)
        )

    def delete(self, name: str) -> None:
        meta = self.get(name)
        self._commit_next(
            meta,
            TopicMeta(
                meta.name,
                meta.topic_id,
                meta.partitions,
                meta.config,
                meta.created_ms,
                deleted=True,
            ),
        )
        self._remove_dir(name)

    def _remove_dir(self, name: str) -> None:
        self.fs.delete_tree(names.topic_dir(self.root, name))
        self.fs.sync_dir(names.topics_dir(self.root))

    def check_partition(self, name: str, partition: int) -> TopicMeta:
        meta = self.get(name)
        if not 0 <= partition < meta.partitions:
            raise UnknownPartitionError(
                f"topic {name!r} has partitions 0..{meta.partitions - 1}, not {partition}"
            )
        return meta
