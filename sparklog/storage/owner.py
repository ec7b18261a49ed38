"""The owner record of a storage root: which kind of broker may write it.

File ``<root>/owner.json`` (``names.owner_path``), created once with create-if-absent
(``FileSystem.create_exclusive``) by the first broker that starts on the root, and never
rewritten::

    {"format": 1, "mode": "embedded", "cluster": null, "etcd": null,
     "created_ms": 1764230000000}
    {"format": 1, "mode": "cluster", "cluster": "default", "etcd": "127.0.0.1:2379",
     "created_ms": 1764230000000}

It plays the part of Kafka's ``meta.properties``, which makes a broker refuse a log dir of
another cluster. ``claim`` rules: a broker of the same mode (and, in cluster mode, the
same cluster name) adopts the record; any other is refused with ``StorageOwnedError``
naming the owner and what to do. ``etcd`` is the first cluster broker's endpoint list,
shown in messages only (endpoints may be listed differently by each broker). A root
written before owner records existed (data, no record) is adopted by its first claimant.
The owner changes only by deleting the file while no broker runs on the root.

The record is not a lock: embedded brokers still exclude each other with the data-dir
lease (``sparklog.storage.lease``), and the brokers of one cluster share the root under
etcd's assignments. What the record prevents is a second *kind* of writer on one root:
an embedded broker and a cluster, or two clusters, which would each commit their own leader
epochs and acknowledge records at the same offsets. A running broker re-reads it
(``verify``): a record that changed means another writer claimed the root.

``check_root`` refuses a data dir that is a file before anything is created.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sparklog.errors import (
    CorruptMetadataError,
    DataDirNotDirectoryError,
    ForeignWriterError,
    StorageOwnedError,
)
from sparklog.storage import names
from sparklog.storage.fs import FileSystem

FORMAT = 1
EMBEDDED = "embedded"
CLUSTER = "cluster"


@dataclass(frozen=True)
class Owner:
    """The content of an owner record (see the module docstring)."""

    mode: str
    cluster: str | None = None
    etcd: str | None = None
    created_ms: int = 0

    @classmethod
    def embedded(cls) -> Owner:
        return cls(EMBEDDED, created_ms=int(time.time() * 1000))

    @classmethod
    def of_cluster(cls, name: str, etcd: str) -> Owner:
        return cls(CLUSTER, name, etcd, int(time.time() * 1000))

    def same_writer(self, other: Owner) -> bool:
        """Whether a broker claiming ``other`` may write a root this record owns."""
        return self.mode == other.mode and (self.mode == EMBEDDED or self.cluster == other.cluster)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.created_ms / 1000))
        if self.mode == EMBEDDED:
            return f"an embedded broker (no --etcd), since {since}"
        return f"cluster {self.cluster!r} (etcd {self.etcd or '?'}), since {since}"

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "mode": self.mode,
                "cluster": self.cluster,
                "etcd": self.etcd,
                "created_ms": self.created_ms,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Owner:
        try:
            d: dict[str, Any] = json.loads(data)
            mode = d["mode"]
            if mode not in (EMBEDDED, CLUSTER) or (mode == CLUSTER and not d.get("cluster")):
                raise ValueError(f"mode {mode!r}, cluster {d.get('cluster')!r}")
            return cls(mode, d.get("cluster"), d.get("etcd"), int(d.get("created_ms", 0)))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where}: not an owner record: {e}") from e


def check_root(fs: FileSystem, root: str, uri: str) -> None:
    """``DataDirNotDirectoryError`` if ``root`` exists and is not a directory."""
    if fs.exists(root) and not fs.is_dir(root):
        raise DataDirNotDirectoryError(
            f"{uri}: the data dir is a file, not a directory; give a directory (it is "
            "created if missing)"
        )


def read(fs: FileSystem, root: str) -> Owner | None:
    """The root's owner record; None if it has none."""
    path = names.owner_path(root)
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        return None
    return Owner.from_json(data, path)


def _refusal(uri: str, path: str, owner: Owner, wanted: Owner) -> StorageOwnedError:
    if wanted.mode == EMBEDDED:
        who, fix = (
            "an embedded broker (no --etcd)",
            f"start it with --etcd {owner.etcd or 'ENDPOINTS'} --cluster {owner.cluster} to "
            "join that cluster",
        )
    else:
        who = f"a broker of cluster {wanted.cluster!r}"
        fix = (
            "run it without --etcd"
            if owner.mode == EMBEDDED
            else f"start it with --cluster {owner.cluster}"
        )
    return StorageOwnedError(
        f"{uri}: this storage root belongs to {owner.describe()} ({path}); {who} may not "
        f"write it: {fix}, or give another --data-dir. To hand the root over, stop every "
        f"broker on it and delete {path}"
    )


def claim(fs: FileSystem, root: str, wanted: Owner, *, uri: str = "") -> Owner:
    """Make ``wanted`` the owner of ``root`` if it has none (creating the root), and return
    the owner; ``StorageOwnedError`` if it belongs to another kind of writer."""
    uri = uri or root
    check_root(fs, root, uri)
    fs.makedirs(root)
    path = names.owner_path(root)
    for _ in range(10):
        if fs.create_exclusive(path, wanted.to_json()):
            return wanted
        owner = read(fs, root)
        if owner is None:  # deleted between the two calls: try again
            continue
        if not owner.same_writer(wanted):
            raise _refusal(uri, path, owner, wanted)
        return owner
    raise CorruptMetadataError(f"{path}: keeps disappearing")


def verify(fs: FileSystem, root: str, mine: Owner, *, uri: str = "") -> ForeignWriterError | None:
    """None while ``root`` still belongs to ``mine``'s kind of writer (a deleted record is
    claimed again); else the ``ForeignWriterError`` that names who took it."""
    try:
        current = read(fs, root)
        if current is None:
            current = claim(fs, root, mine, uri=uri)
    except (StorageOwnedError, CorruptMetadataError) as e:
        return ForeignWriterError(f"the owner record changed: {e}")
    if current.same_writer(mine):
        return None
    return ForeignWriterError(
        f"{uri or root}: the owner record now names {current.describe()} "
        f"({names.owner_path(root)}); this broker was started as {mine.describe()}"
    )
