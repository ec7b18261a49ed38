"""Every file and directory name storage uses, built here and parsed back here.

Layout under a storage root::

    <root>/.lock                                   data-dir lease (embedded mode)
    <root>/owner.json                              who owns the root: embedded or a cluster
    <root>/.leases/<name>.lock                     other local leases
    <root>/producer-ids.json                       producer-id blocks reserved (broker)
    <root>/cluster.json                            the cluster id (broker)
    <root>/.export-tmp-<run>/                      an export's scratch files
    <root>/topics/<topic>/meta/<version>.json      topic metadata, versioned
    <root>/topics/<topic>/.compaction.lock         lease of a running compaction job
    <root>/topics/<topic>/<partition>/
        manifest/<version>.json                    the live segment set, versioned
        00000000000000000000.parquet               sealed segment, generation 0
        00000000000000001000.00002.parquet         sealed segment rewritten by compaction
        00000000000000002000.arrow                 active (appendable) segment
        00000000000000003000-e00000000007.arrow    active segment of leader epoch 7 (cluster)
        00000000000000003000-e00000000008.parquet  sealed by the leader of epoch 8 (cluster)
        <segment file>.index / .timeindex          sparse offset / time index
        high-watermark.checkpoint, recovery-point.checkpoint, leader-epoch.json
        high-watermark.e00000000007.checkpoint     the high watermark of epoch 7's segments
        producer-state.json                        idempotent-producer snapshot
        transactions.checkpoint                    readers' transaction index
        transactions.e00000000007.checkpoint       the same, of epoch 7's segments
    <root>/topic-defaults/<version>.json           dynamic topic defaults, versioned
    <root>/topics/<topic>/jobs/<job>.json          the last run of a maintenance job
    <root>/wal/<writer>/<seq>.wal                  a tail round of a broker on object storage
    <root>/security/users/<version>.json           SCRAM credentials, versioned
    <root>/security/acls/<version>.json            ACLs, versioned

No other module formats or parses these strings (``segment_name(42)`` and
``parse_segment_name`` are a pair, as are the others).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sparklog.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]+$")

SegmentKind = Literal["arrow", "parquet"]
ACTIVE_KIND: SegmentKind = "arrow"
SEALED_KIND: SegmentKind = "parquet"

TOPICS_DIR = "topics"
TOPIC_META_DIR = "meta"
TOPIC_DEFAULTS_DIR = "topic-defaults"
SECURITY_DIR = "security"
SECURITY_DOCUMENTS = ("users", "acls")
JOBS_DIR = "jobs"
JOBS = ("retention", "compaction")
MANIFEST_DIR = "manifest"
LOCK_FILE = ".lock"
OWNER_FILE = "owner.json"
COMPACTION_LOCK_FILE = ".compaction.lock"
LEASES_DIR = ".leases"
HIGH_WATERMARK_FILE = "high-watermark.checkpoint"
RECOVERY_POINT_FILE = "recovery-point.checkpoint"
LEADER_EPOCH_FILE = "leader-epoch.json"
PRODUCER_STATE_FILE = "producer-state.json"
PRODUCER_IDS_FILE = "producer-ids.json"
CLUSTER_FILE = "cluster.json"
EXPORT_SCRATCH_PREFIX = ".export-tmp-"
TXN_INDEX_FILE = "transactions.checkpoint"
OFFSET_INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TMP_PREFIX = ".tmp-"
WAL_DIR = "wal"
WAL_SUFFIX = ".wal"
#: the writer name of an embedded broker's tail rounds (a cluster broker's is ``n<node id>``)
EMBEDDED_WRITER = "embedded"
_WAL_RE = re.compile(r"^(\d{20})\.wal$")
_WRITER_RE = re.compile(r"^(?:embedded|n\d+)$")

_SEGMENT_RE = re.compile(r"^(\d{20})(?:-e(\d{11}))?(?:\.(\d{5}))?\.(arrow|parquet)$")
_HWM_EPOCH = "high-watermark.e{:011d}.checkpoint"
_TXN_INDEX_PREFIX = "transactions."
_TXN_INDEX_EPOCH = "transactions.e{:011d}.checkpoint"
_TXN_INDEX_EPOCH_RE = re.compile(r"^transactions\.e(\d{11})\.checkpoint$")
_VERSION_RE = re.compile(r"^(\d{20})\.json$")
_LEASE_PART = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise InvalidTopicError.

    Kafka's rule: 1 to 249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``.
    The rule also makes every topic a single path component, so no name can escape the root.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if not _TOPIC_RE.match(name):
        bad = sorted({c for c in name if not re.match(r"[a-zA-Z0-9._-]", c)})
        raise InvalidTopicError(
            f"topic name {name!r} contains illegal characters {bad!r}; "
            "allowed: ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def validate_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be a non-negative integer, got {partition!r}")
    return partition


@dataclass(frozen=True)
class SegmentName:
    """A parsed segment file name."""

    base_offset: int
    generation: int
    kind: SegmentKind
    epoch: int | None = None


def segment_name(
    base_offset: int,
    *,
    kind: SegmentKind = SEALED_KIND,
    generation: int = 0,
    epoch: int | None = None,
) -> str:
    """``segment_name(42) == "00000000000000000042.parquet"``. ``epoch``: the leader epoch
    of the cluster-mode writer that created the file (``...42-e00000000007.arrow``), so
    that two leaders of a partition never create the same file."""
    if base_offset < 0 or generation < 0 or generation > 99999:
        raise ValueError(f"bad segment base offset {base_offset} or generation {generation}")
    if kind not in (ACTIVE_KIND, SEALED_KIND):
        raise ValueError(f"unknown segment kind {kind!r}")
    if epoch is not None and not 0 <= epoch < 10**11:
        raise ValueError(f"bad leader epoch {epoch}")
    ep = f"-e{epoch:011d}" if epoch is not None else ""
    gen = f".{generation:05d}" if generation else ""
    return f"{base_offset:020d}{ep}{gen}.{kind}"


def parse_segment_name(name: str) -> SegmentName | None:
    """The inverse of ``segment_name``; None for names that are not segment files."""
    m = _SEGMENT_RE.match(name)
    if not m:
        return None
    kind: SegmentKind = ACTIVE_KIND if m.group(4) == ACTIVE_KIND else SEALED_KIND
    epoch = int(m.group(2)) if m.group(2) is not None else None
    return SegmentName(int(m.group(1)), int(m.group(3) or 0), kind, epoch)


def high_watermark_file(active_segment: str) -> str:
    """The high-watermark checkpoint of the active segment named ``active_segment``: one
    per leader epoch in cluster mode (a deposed leader moving its own checkpoint changes
    nothing a reader of the successor's manifest reads), the one shared name otherwise."""
    parsed = parse_segment_name(active_segment)
    if parsed is None or parsed.epoch is None:
        return HIGH_WATERMARK_FILE
    return _HWM_EPOCH.format(parsed.epoch)


def txn_index_file(active_segment: str) -> str:
    """The readers' transaction index (``sparklog.storage.txnindex``) of the active segment
    named ``active_segment``: one per leader epoch in cluster mode, as the high watermark."""
    parsed = parse_segment_name(active_segment)
    if parsed is None or parsed.epoch is None:
        return TXN_INDEX_FILE
    return _TXN_INDEX_EPOCH.format(parsed.epoch)


def is_txn_index_file(name: str) -> bool:
    """Whether ``name`` is a transaction index, shared or of one epoch."""
    return name.startswith(_TXN_INDEX_PREFIX)


def txn_index_epoch(name: str) -> int | None:
    """The inverse of ``txn_index_file`` for an epoch's index: its leader epoch; None for
    any other name (the shared index too)."""
    m = _TXN_INDEX_EPOCH_RE.match(name)
    return int(m.group(1)) if m else None


def offset_index_name(segment: str) -> str:
    return segment + OFFSET_INDEX_SUFFIX


def time_index_name(segment: str) -> str:
    return segment + TIME_INDEX_SUFFIX


def segment_files(segment: str) -> tuple[str, str, str]:
    """A segment file and its two indexes."""
    return segment, offset_index_name(segment), time_index_name(segment)


def index_owner(name: str) -> str | None:
    """The segment file an index file belongs to, or None if ``name`` is not an index."""
    for suffix in (OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        if name.endswith(suffix):
            owner = name[: -len(suffix)]
            return owner if parse_segment_name(owner) else None
    return None


def version_name(version: int) -> str:
    """Manifest and topic-metadata versions: ``version_name(3) == "00000000000000000003.json"``."""
    if version < 0:
        raise ValueError(f"bad version {version}")
    return f"{version:020d}.json"


def parse_version_name(name: str) -> int | None:
    m = _VERSION_RE.match(name)
    return int(m.group(1)) if m else None


def owner_path(root: str) -> str:
    return f"{root.rstrip('/')}/{OWNER_FILE}"


def topics_dir(root: str) -> str:
    return f"{root.rstrip('/')}/{TOPICS_DIR}"


def topic_dir(root: str, topic: str) -> str:
    return f"{topics_dir(root)}/{validate_topic_name(topic)}"


def topic_meta_dir(root: str, topic: str) -> str:
    return f"{topic_dir(root, topic)}/{TOPIC_META_DIR}"


def topic_defaults_dir(root: str) -> str:
    """The versions of the dynamic topic defaults (``sparklog.storage.topics``)."""
    return f"{root.rstrip('/')}/{TOPIC_DEFAULTS_DIR}"


def security_dir(root: str, document: str) -> str:
    """The versions of the security document ``document`` (``users`` or ``acls``,
    ``sparklog.security.store``)."""
    if document not in SECURITY_DOCUMENTS:
        raise ValueError(f"unknown security document {document!r}: one of users, acls")
    return f"{root.rstrip('/')}/{SECURITY_DIR}/{document}"


def job_run_path(root: str, topic: str, job: str) -> str:
    """The last run of maintenance job ``job`` on ``topic`` (``sparklog.storage.jobruns``)."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}: one of {', '.join(JOBS)}")
    return f"{topic_dir(root, topic)}/{JOBS_DIR}/{job}.json"


def compaction_lock_path(root: str, topic: str) -> str:
    return f"{topic_dir(root, topic)}/{COMPACTION_LOCK_FILE}"


def lease_path(directory: str, name: str) -> str:
    """The lock file of lease ``name`` under ``directory`` (``sparklog.storage.lease``):
    ``data-dir`` -> ``.lock``, ``compaction/<topic>`` -> the topic's ``.compaction.lock``,
    other names -> ``.leases/<name>.lock``."""
    if name == "data-dir":
        return f"{directory.rstrip('/')}/{LOCK_FILE}"
    kind, _, rest = name.partition("/")
    if kind == "compaction" and rest:
        return compaction_lock_path(directory, rest)
    parts = name.split("/")
    if not name or any(not p or p in (".", "..") or not _LEASE_PART.match(p) for p in parts):
        raise ValueError(f"bad lease name {name!r}")
    return f"{directory.rstrip('/')}/{LEASES_DIR}/{name}.lock"


def wal_dir(root: str, writer: str | None = None) -> str:
    """The tail rounds of every writer (``writer`` None), or of one (``n3``, ``embedded``)."""
    if writer is None:
        return f"{root.rstrip('/')}/{WAL_DIR}"
    if not _WRITER_RE.match(writer):
        raise ValueError(f"bad tail writer name {writer!r}")
    return f"{root.rstrip('/')}/{WAL_DIR}/{writer}"


def wal_writer(node_id: int | None) -> str:
    """The writer name of a broker's tail rounds: ``n<node id>``, or ``embedded``."""
    return EMBEDDED_WRITER if node_id is None else f"n{node_id}"


def wal_object(seq: int) -> str:
    """Tail round ``seq`` of a writer, relative to its ``wal_dir``."""
    if not 0 <= seq < 10**20:
        raise ValueError(f"bad tail round number {seq}")
    return f"{seq:020d}{WAL_SUFFIX}"


def parse_wal_object(name: str) -> int | None:
    """The inverse of ``wal_object``; None for other names."""
    m = _WAL_RE.match(name)
    return int(m.group(1)) if m else None


def is_cache_file(name: str) -> bool:
    """Whether a partition directory's file ``name`` lives in a broker's local cache when
    the root is on object storage: active and rolled ``.arrow`` segments, their indexes,
    and the high-watermark and recovery-point checkpoints (``sparklog.storage.fs.tiered``).
    Their durable form is the tail in the object store (``sparklog.storage.tail``)."""
    if name.startswith("high-watermark") or name == RECOVERY_POINT_FILE:
        return True
    owner = index_owner(name) or name
    seg = parse_segment_name(owner)
    return seg is not None and seg.kind == ACTIVE_KIND


def partition_dir(root: str, topic: str, partition: int) -> str:
    return f"{topic_dir(root, topic)}/{validate_partition(partition)}"


def manifest_dir(partition_path: str) -> str:
    return f"{partition_path}/{MANIFEST_DIR}"


def manifest_file(version: int) -> str:
    """Manifest version ``version`` relative to its partition directory."""
    return f"{MANIFEST_DIR}/{version_name(version)}"
