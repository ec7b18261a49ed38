"""Topics: names, partition counts and configs, stored durably under the storage root.

Format: ``<root>/topics/<topic>/meta/<version>.json``, versioned and committed by
create-if-absent like the manifest (``VersionedFiles``)::

    {"format": 1, "name": "orders", "topic_id": "<uuid4 hex>", "partitions": 6,
     "configs": {"cleanup.policy": "compact"}, "created_ms": ..., "deleted": false}

``configs`` holds only the topic's own values (overrides; defaults can then evolve). A
topic's effective configs are Kafka's defaults, then the cluster-wide *dynamic defaults*,
then its own: dynamic defaults (``kafka-configs --entity-type brokers --entity-default``,
AlterConfigs on the default broker resource) are versioned files of their own,
``<root>/topic-defaults/<version>.json`` = ``{"format": 1, "configs": {...}}`` (topic
config names), committed by create-if-absent, read by every process that reads topics,
and they change every topic that does not set the config itself, as Kafka's do. Creating a topic
commits version 0 (so two concurrent creators cannot both win); changing partitions or
configs commits the next version. Deleting commits a version with ``"deleted": true`` and
then removes the topic directory; a topic whose latest version says deleted is absent, and
its directory is removed by the next ``TopicStore`` that sees it (a crash mid-delete).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.errors import (
    CorruptMetadataError,
    InvalidConfigError,
    InvalidPartitionsError,
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
    #: the topic's own configs (None: those of ``config`` that differ from Kafka's)
    explicit: Mapping[str, Any] | None = None

    @property
    def own_configs(self) -> dict[str, Any]:
        """The configs the topic sets itself (not inherited from any default)."""
        return dict(self.explicit) if self.explicit is not None else self.config.non_defaults()

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "name": self.name,
                "topic_id": self.topic_id,
                "partitions": self.partitions,
                "configs": self.own_configs,
                "created_ms": self.created_ms,
                "deleted": self.deleted,
            },
            indent=1,
        ).encode()

    @classmethod
    def from_json(
        cls, data: bytes, version: int, where: str, defaults: Mapping[str, Any] | None = None
    ) -> TopicMeta:
        try:
            d = json.loads(data)
            if d.get("format") != FORMAT:
                raise CorruptMetadataError(f"{where}: unknown topic format {d.get('format')}")
            own = dict(d.get("configs") or {})
            return cls(
                name=str(d["name"]),
                topic_id=str(d["topic_id"]),
                partitions=int(d["partitions"]),
                config=TopicConfig.from_mapping({**(defaults or {}), **own}),
                created_ms=int(d.get("created_ms", 0)),
                version=version,
                deleted=bool(d.get("deleted", False)),
                explicit=own,
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where}: unreadable topic metadata: {e}") from e


def _typed(configs: Mapping[str, Any]) -> dict[str, Any]:
    """``configs`` checked (InvalidConfigError names a bad one) and parsed to their types,
    as a topic's metadata stores them."""
    parsed = TopicConfig.from_mapping(configs).to_mapping()
    return {k: parsed[k] for k in configs}


def _check_partitions(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
        raise InvalidPartitionsError(
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

    # ------------------------------------------------------------------ dynamic defaults

    def _defaults_files(self) -> VersionedFiles:
        return VersionedFiles(self.fs, names.topic_defaults_dir(self.root))

    def defaults(self) -> dict[str, Any]:
        """The cluster-wide dynamic topic defaults (module docstring); {} when none."""
        files = self._defaults_files()
        # no ``exists`` first: a missing directory lists empty, and on an object store
        # ``latest`` probes without listing (``sparklog.storage.versioned``)
        found = files.latest()
        if found is None:
            return {}
        version, data = found
        try:
            return dict(json.loads(data)["configs"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{files.path(version)}: unreadable defaults: {e}") from e

    def set_defaults(
        self,
        sets: Mapping[str, Any],
        deletes: Iterable[str] = (),
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> dict[str, Any]:
        """Change the dynamic defaults (checked like a topic's configs) as the next version;
        returns them."""
        for key in [*sets, *deletes]:
            if key not in CONFIG_NAMES:
                raise InvalidConfigError(f"unknown topic config {key!r}")
        files = self._defaults_files()
        for _ in range(10):
            found = files.latest()
            current = {} if replace or found is None else dict(json.loads(found[1])["configs"])
            for key in deletes:
                current.pop(key, None)
            current.update({k: str(v) for k, v in sets.items()})
            TopicConfig.from_mapping(current)  # InvalidConfigError names a bad value
            if validate_only:
                return current
            self.fs.makedirs(files.directory)
            data = json.dumps({"format": 1, "configs": current}, indent=1).encode()
            if files.try_commit(0 if found is None else found[0] + 1, data):
                return current
        raise CorruptMetadataError("dynamic topic defaults kept changing concurrently")

    def _latest(self, name: str, defaults: Mapping[str, Any] | None = None) -> TopicMeta | None:
        files = self._files(name)
        found = files.latest()
        if found is None:
            return None
        version, data = found
        if defaults is None:
            defaults = self.defaults()
        return TopicMeta.from_json(data, version, files.path(version), defaults)

    def create(
        self, name: str, partitions: int = 1, configs: Mapping[str, Any] | None = None
    ) -> TopicMeta:
        names.validate_topic_name(name)
        _check_partitions(partitions)
        own = _typed(configs or {})
        config = TopicConfig.from_mapping({**self.defaults(), **own})
        files = self._files(name)
        latest = self._latest(name)
        if latest is not None and not latest.deleted:
            raise TopicExistsError(f"topic {name!r} already exists")
        if latest is not None:
            self._remove_dir(name)
        meta = TopicMeta(
            name, uuid.uuid4().hex, partitions, config, int(time.time() * 1000), explicit=own
        )
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
        defaults = self.defaults()
        for name in self.fs.listdir(names.topics_dir(self.root)):
            try:
                names.validate_topic_name(name)
            except ValueError:
                continue
            meta = self._latest(name, defaults)
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
            new.explicit,
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
        current = {} if replace else meta.own_configs
        for key in delete:
            if key not in CONFIG_NAMES:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            current.pop(key, None)
        own = _typed({**current, **dict(configs or {})})
        config = TopicConfig.from_mapping({**self.defaults(), **own})
        new = TopicMeta(
            meta.name, meta.topic_id, meta.partitions, config, meta.created_ms, explicit=own
        )
        return new if validate_only else self._commit_next(meta, new)

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.get(name)
        _check_partitions(total)
        if total <= meta.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {meta.partitions} partitions; the new count {total} "
                "must be larger"
            )
        return self._commit_next(
            meta,
            TopicMeta(
                meta.name,
                meta.topic_id,
                total,
                meta.config,
                meta.created_ms,
                explicit=meta.own_configs,
            ),
        )

    def delete(self, name: str, progress: Callable[[int, int], None] | None = None) -> None:
        """Delete topic ``name``: its metadata marked deleted first, then its files,
        partition by partition (``progress(done, partitions)`` after each)."""
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
                explicit=meta.own_configs,
            ),
        )
        self._remove_dir(name, meta.partitions, progress)

    def _remove_dir(
        self, name: str, partitions: int = 0, progress: Callable[[int, int], None] | None = None
    ) -> None:
        if progress is not None:  # a large log: one partition at a time, to say how far
            for p in range(partitions):
                path = names.partition_dir(self.root, name, p)
                if self.fs.exists(path):
                    self.fs.delete_tree(path)
                progress(p + 1, partitions)
        self.fs.delete_tree(names.topic_dir(self.root, name))
        self.fs.sync_dir(names.topics_dir(self.root))

    def check_partition(self, name: str, partition: int) -> TopicMeta:
        meta = self.get(name)
        if not 0 <= partition < meta.partitions:
            raise UnknownPartitionError(
                f"topic {name!r} has partitions 0..{meta.partitions - 1}, not {partition}"
            )
        return meta
