"""Garbage collection of files that no manifest version needs any more.

Rules, for one partition directory (``collect_garbage``):

- A segment file (and its ``.index``/``.timeindex``) named by the latest manifest, or in
  ``keep`` (the writer's own manifest: segments of rolls not committed yet), is live.
- A segment file named by an older, still-present manifest version but not by the latest
  was *dereferenced* when the first version without it was committed; it is deleted once
  that is ``file.delete.delay.ms`` old, so readers holding the older version finish.
- A segment file no present manifest names (a crashed writer's output, or a compaction
  job's output not yet committed) is deleted once its mtime is ``orphan_grace_ms`` old.
- An index file whose segment file is gone is deleted.
- Temporary files (``.tmp-*``) older than ``orphan_grace_ms`` are deleted.
- Manifest versions older than the newest ``keep_versions`` and superseded for longer
  than ``file.delete.delay.ms`` are deleted.

Only the partition's single writer (the broker, or an offline tool holding the lock) runs
this; compaction jobs never delete.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Collection
from dataclasses import dataclass, field

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import ManifestStore

KEEP_VERSIONS = 10


@dataclass
class GcReport:
    deleted: list[str] = field(default_factory=list)


def collect_garbage(
    fs: FileSystem,
    partition_path: str,
    store: ManifestStore,
    *,
    now_ms: int,
    delete_delay_ms: int,
    orphan_grace_ms: int,
    keep_versions: int = KEEP_VERSIONS,
    keep: Collection[str] = (),
) -> GcReport:
    report = GcReport()
    versions = store.files.versions()
    if not versions:
        return report
    latest = store.read(versions[-1])
    live = latest.names() | set(keep)
    # name -> commit time of the first version (after its last mention) that dropped it
    dereferenced_at: dict[str, int] = {}
    manifests = []
    for v in versions[:-1]:
        try:
            manifests.append(store.read(v))
        except (FileNotFoundError, CorruptMetadataError):
            continue
    manifests.append(latest)
    for older, newer in itertools.pairwise(manifests):
        for name in older.names() - newer.names():
            dereferenced_at[name] = newer.committed_ms
    for name in fs.listdir(partition_path):
        path = fs.join(partition_path, name)
        if name.startswith(names.TMP_PREFIX):
            with contextlib.suppress(FileNotFoundError):  # a create in progress, gone since
                if now_ms - fs.mtime_ms(path) >= orphan_grace_ms:
                    fs.delete(path)
                    report.deleted.append(name)
            continue
        seg = names.parse_segment_name(name)
        owner = names.index_owner(name)
        if seg is None and owner is None:
            continue
        target = name if seg is not None else owner
        assert target is not None
        if target in live:
            continue
        if seg is None and not fs.exists(fs.join(partition_path, target)):
            fs.delete(path)
            report.deleted.append(name)
            continue
        if target in dereferenced_at:
            expired = now_ms - dereferenced_at[target] >= delete_delay_ms
        else:
            expired = now_ms - fs.mtime_ms(fs.join(partition_path, target)) >= orphan_grace_ms
        if expired:
            fs.delete(path)
            report.deleted.append(name)
    mdir = names.manifest_dir(partition_path)
    for name in fs.listdir(mdir):
        if name.startswith(names.TMP_PREFIX):
            path = fs.join(mdir, name)
            # a writer's create in progress links, then unlinks, its temporary file
            with contextlib.suppress(FileNotFoundError):
                if now_ms - fs.mtime_ms(path) >= orphan_grace_ms:
                    fs.delete(path)
    by_version = {m.version: m for m in manifests}
    for i, v in enumerate(versions[: max(len(versions) - keep_versions, 0)]):
        successor = by_version.get(versions[i + 1])
        if successor is None or now_ms - successor.committed_ms >= delete_delay_ms:
            store.files.delete(v)
            report.deleted.append(names.manifest_file(v))
    return report
