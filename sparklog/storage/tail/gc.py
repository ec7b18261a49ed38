"""Collecting round objects nobody references (a cluster's controller runs it).

A round object (``objects``) is referenced while a committed chunk in etcd names it. Two
kinds are referenced by nothing: rounds uploaded but never committed (the broker died or
was fenced between the PUT and the transaction, or dropped the round after a failure),
and rounds whose every chunk was sealed into Parquet and dropped. ``collect_rounds``
deletes objects that no chunk references and that are older than ``delay_ms``, counted
from the round number, which a cluster broker takes from its clock in microseconds
(``EtcdTail.next_seq``): a round is committed within the tail timeout of its upload or
never, so a delay far longer than that (minutes) cannot delete a round whose commit is
still to come. One LIST per writer directory per run: never on a hot path.
"""

from __future__ import annotations

import logging

from sparklog.storage import names
from sparklog.storage.fs import FileSystem

log = logging.getLogger(__name__)


def collect_rounds(
    fs: FileSystem, root: str, referenced: set[str], *, now_ms: int, delay_ms: int
) -> list[str]:
    """Delete the cluster's unreferenced round objects older than ``delay_ms``; returns
    them (paths relative to ``root``)."""
    deleted = []
    top = names.wal_dir(root)
    for writer in fs.listdir(top):
        if writer == names.EMBEDDED_WRITER:
            continue  # an embedded broker's rounds are its own to delete
        for name in fs.listdir(fs.join(top, writer)):
            seq = names.parse_wal_object(name)
            if seq is None:
                continue
            rel = f"{names.WAL_DIR}/{writer}/{name}"
            if rel in referenced or now_ms - seq // 1000 < delay_ms:
                continue
            fs.delete(fs.join(root, rel))
            deleted.append(rel)
    if deleted:
        log.info("deleted %d round object(s) nobody references", len(deleted))
    return deleted
