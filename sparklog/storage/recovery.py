"""Recovery: what ``PartitionLog.open`` does to a partition directory before the log serves.

Steps (each safe to redo: a crash during recovery is recovered by the next open):

1. Delete temporary files (``.tmp-*``), orphan ``.arrow`` files past the active segment (a
   roll that never committed: only the writer makes them) and generation-0 Parquet files of
   segments still awaiting their seal (a seal that never committed) or that no manifest
   version ever named (a seal refused because retention dropped its segment).
2. Walk the active segment's frames, checking magic, bounds, CRC and offset continuity;
   truncate at the first bad frame (the longest valid prefix survives) and rebuild its
   indexes. A truncation below the recovery point or below a surviving high-watermark
   checkpoint (both written only after an fsync) means acknowledged data was damaged:
   ``RecoveryReport.lost_acknowledged``, and a warning.
3. (``PartitionLog.open``, after this module) write both checkpoints, rebuild the producer
   state (``producer_states``: the snapshot plus a replay of the records after it), redo
   unfinished seals, collect garbage.

A partition with no manifest yet gets version 0: one empty active segment at offset 0.

Take-over (cluster mode, ``take_over``): the broker the controller made leader at epoch E
1. commits ``EpochChange(E)`` - from then on every manifest commit of an older leader,
   which may still be running (paused, cut off from etcd), is refused;
2. only then recovers as above (orphans and the torn tail are the old leader's, and it can
   no longer commit a roll that would name them);
3. creates the new active segment ``<end>-e<E>.arrow`` (a name no other leader uses) and
   commits ``TakeOver``: the old active segment frozen at the end of its longest valid
   prefix (dropped if empty), the new one active. Whatever the old leader appends to its
   file afterwards lies past the frozen end, which is all any reader reads.
A crash between the steps is redone by the next take-over (of this broker at E, or of
another at E+1): each step checks what the previous one left.

On object storage (``open_partition`` with a tail) the committed tail is claimed and the
cache rebuilt from it first; segments the tail holds past the manifest's active one are
rolls the last writer had not committed yet (``sparklog.storage.rolls``): they are
committed (``transforms.Rolled``; after the ``EpochChange`` of a take-over, fenced by it)
before the steps above, so recovery finds them named.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from sparklog.errors import CorruptMetadataError, CorruptSegmentError
from sparklog.storage import checkpoints, crashpoints, names, transforms
from sparklog.storage.active import ActiveSegment
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.producers import ProducerStates, read_snapshot
from sparklog.storage.sealed import PRODUCER_STATE_KEY, SealedSegment
from sparklog.storage.tail import BrokerTail, rebuild
from sparklog.storage.versioned import on_object_store

log = logging.getLogger(__name__)
crashpoints.register("take_over.after_claim")
#: the stored columns producer-state recovery reads
PRODUCER_COLUMNS = ["offset", "key", "producer_id", "producer_epoch", "sequence", "attributes"]


@dataclass
class RecoveryReport:
    """What ``PartitionLog.open`` found and repaired."""

    truncated_bytes: int = 0
    lost_acknowledged: bool = False
    resealed: list[str] = field(default_factory=list)
    deleted_orphans: list[str] = field(default_factory=list)


@dataclass
class Recovered:
    """A partition directory after steps 1 and 2: its latest manifest and open active
    segment, ready for the writer."""

    store: ManifestStore
    manifest: Manifest
    active: ActiveSegment
    report: RecoveryReport
    #: the partition directory's names as recovery listed them (one LIST on an object
    #: store, which ``PartitionLog.open`` reuses instead of listing again)
    listing: tuple[str, ...] = ()
    #: the producer snapshot a take-over on object storage read while the cache was
    #: rebuilt (``producer_states``' starting point); None: not read yet
    snapshot: ProducerStates | None = None

    @property
    def active_epoch(self) -> int | None:
        """The leader epoch in the active segment's name (cluster mode), else None."""
        parsed = names.parse_segment_name(self.active.name)
        return None if parsed is None else parsed.epoch


def _ever_named(store: ManifestStore) -> set[str]:
    """Every segment name some present manifest version names."""
    out: set[str] = set()
    for v in store.files.versions():
        try:
            out |= store.read(v).names()
        except (FileNotFoundError, CorruptMetadataError):
            continue
    return out


def _delete_orphans(
    fs: FileSystem,
    path: str,
    store: ManifestStore,
    manifest: Manifest,
    report: RecoveryReport,
    listing: list[str],
) -> None:
    live = manifest.names()
    unsealed = {s.base_offset for s in manifest.unsealed_rolled}
    named: set[str] | None = None
    for name in listing:
        seg = names.parse_segment_name(name)
        if seg is None or name in live:
            continue
        # an .arrow file past the active one is a roll that never committed; older
        # unnamed .arrow files were sealed and wait out file.delete.delay.ms in gc
        orphan_arrow = (
            seg.kind == names.ACTIVE_KIND and seg.base_offset > manifest.active.base_offset
        )
        # a generation-0 Parquet file is the writer's seal: of a segment still awaiting
        # it (a seal that never committed), or one no manifest version ever named (a seal
        # refused because retention dropped its segment meanwhile); a sealed file some
        # older version names waits out file.delete.delay.ms in gc, for readers
        orphan_seal = seg.generation == 0 and seg.base_offset in unsealed
        if not orphan_seal and seg.generation == 0 and seg.kind == names.SEALED_KIND:
            if named is None:
                named = _ever_named(store)
            orphan_seal = name not in named
        if orphan_arrow or orphan_seal:
            for n in names.segment_files(name):
                fs.delete(fs.join(path, n))
            report.deleted_orphans.append(name)


def _position_or_none(fs: FileSystem, path: str, name: str) -> LogPosition | None:
    try:
        return checkpoints.read_position(fs, path, name)
    except Exception:  # an unreadable checkpoint only costs the "lost acknowledged" hint
        return None


def recover(
    fs: FileSystem,
    path: str,
    config: TopicConfig,
    store: ManifestStore,
    *,
    now_ms: int,
    label: str,
    manifest: Manifest | None = None,
) -> Recovered:
    """Steps 1 and 2 of the module docstring for the partition directory ``path``.

    ``manifest``: the version the caller committed a moment ago (a take-over's), used
    instead of reading the latest (2 GETs on an object store). It is safe to act on: after
    the take-over's ``EpochChange`` no older leader commits, and what a job may commit
    meanwhile (retention, compaction) names no generation-0 file and moves no active
    segment, which is all the orphan step looks at; the ``TakeOver`` commit that follows
    wins only on the latest version, and decides again otherwise.

    The directory is listed once: for temporary files and for orphans (files created
    after the listing are this call's own, which the manifest names)."""
    fs.makedirs(names.manifest_dir(path))
    report = RecoveryReport()
    listing = fs.listdir(path)
    for name in listing:
        if name.startswith(names.TMP_PREFIX):
            fs.delete(fs.join(path, name))
    listing = [n for n in listing if not n.startswith(names.TMP_PREFIX)]
    if manifest is None:
        manifest = store.latest()
    if manifest is None:
        info = SegmentInfo(
            names.segment_name(0, kind=names.ACTIVE_KIND), 0, None, created_ms=now_ms
        )
        # only the file: ActiveSegment.open below opens it (an unclosed segment here held
        # three descriptors per new partition for the life of the process)
        ActiveSegment.create(fs, path, 0, config.index_interval_bytes).close()
        manifest = store.create_initial(Manifest(0, 0, (info,)))
    _delete_orphans(fs, path, store, manifest, report, listing)
    active, truncated = ActiveSegment.open(
        fs, path, manifest.active.name, config.index_interval_bytes
    )
    report.truncated_bytes = truncated
    acked = [
        p.position
        for p in (
            _position_or_none(fs, path, names.RECOVERY_POINT_FILE),
            _position_or_none(fs, path, names.high_watermark_file(manifest.active.name)),
        )
        if p is not None and p.segment == active.base_offset
    ]
    if truncated and acked:
        report.lost_acknowledged = active.size < max(acked)
    if truncated:
        log.warning(
            "%s: truncated %d bytes of a torn or corrupt tail of %s%s",
            label,
            truncated,
            active.name,
            " (below the recovery point: acknowledged data was lost)"
            if report.lost_acknowledged
            else "",
        )
    return Recovered(store, manifest, active, report, tuple(listing))


def take_over(
    fs: FileSystem,
    path: str,
    config: TopicConfig,
    store: ManifestStore,
    epoch: int,
    *,
    now_ms: int,
    label: str,
    tail_rolls: list[str] | None = None,
    read: Manifest | None = None,
    rebuilt: Callable[[], object] | None = None,
) -> Recovered:
    """Take the partition over at leader epoch ``epoch`` (the module docstring's steps);
    ``LeaseLostError`` if a newer epoch committed meanwhile. ``tail_rolls``: segments past
    the active one rebuilt from the tail, whose rolls are committed after the epoch.
    ``read``: the manifest the caller just read, tried first by the epoch's commit.

    ``rebuilt``: waits for the cache rebuild that runs beside this call (object storage:
    ``open_partition``). Until then only what does not read the cache is done: the
    ``EpochChange`` commit, and the reads of the leader-epoch history and the producer
    snapshot (``Recovered.snapshot``), a request each that would otherwise come after
    the rebuild's GETs instead of beside them."""
    committed: Manifest | None = None
    history: list[tuple[int, int]] | None = None
    snapshot: ProducerStates | None = None
    if read is not None or store.latest() is not None:
        committed = store.commit(transforms.EpochChange(epoch, label), current=read)
    if rebuilt is not None:
        history = checkpoints.read_leader_epochs(fs, path)
        snapshot = _read_snapshot(fs, path, committed)
        rebuilt()
    if committed is not None:
        rolls = tail_rolls or []
        committed = _commit_tail_rolls(
            fs, path, config, store, rolls, epoch, now_ms=now_ms, label=label, current=committed
        )
    found = recover(fs, path, config, store, now_ms=now_ms, label=label, manifest=committed)
    found.snapshot = snapshot
    if found.manifest.leader_epoch < epoch:  # a partition no writer had opened
        found.manifest = store.commit(transforms.EpochChange(epoch, label), current=found.manifest)
    if found.active_epoch == epoch:  # this broker took it over at this epoch before
        _record_epoch(fs, path, epoch, found.active.base_offset, history)
        return found
    old = found.active
    end = old.next_offset
    new = ActiveSegment.create(fs, path, end, config.index_interval_bytes, epoch=epoch)
    frozen = None
    if old.frame_count:
        frozen = SegmentInfo(
            old.name,
            old.base_offset,
            end,
            records=end - old.base_offset,
            size_bytes=old.size,
            max_timestamp=old.max_timestamp,
            created_ms=found.manifest.active.created_ms,
        )
    active = SegmentInfo(new.name, end, None, created_ms=now_ms)
    try:
        manifest = store.commit(
            transforms.TakeOver(epoch, old.name, frozen, active, label), current=found.manifest
        )
    except BaseException:
        new.close()
        raise
    finally:
        old.close()
    _record_epoch(fs, path, epoch, end, history)
    log.info(
        "%s: taken over at leader epoch %d from offset %d (%s %s)",
        label,
        epoch,
        end,
        old.name,
        "frozen" if frozen else "empty, dropped",
    )
    return Recovered(store, manifest, new, found.report, found.listing, snapshot)


def open_partition(
    fs: FileSystem,
    root: str,
    topic: str,
    partition: int,
    config: TopicConfig,
    store: ManifestStore,
    *,
    leader_epoch: int | None,
    tail: BrokerTail | None,
    now_ms: int,
) -> Recovered:
    """What ``PartitionLog.open`` does before the log serves: ``recover``, or ``take_over``
    at ``leader_epoch``. On object storage (``tail``) the tail is claimed first (a
    cluster's take-over fences older leaders there, and reads the committed chunks in the
    same etcd transaction) and the cache's unsealed segment files are rebuilt from it
    (``tail.rebuild.materialize``), so that recovery finds exactly the committed bytes."""
    path = names.partition_dir(root, topic, partition)
    label = f"{topic}-{partition}"
    if tail is None:
        if leader_epoch is None:
            return recover(fs, path, config, store, now_ms=now_ms, label=label)
        return take_over(fs, path, config, store, leader_epoch, now_ms=now_ms, label=label)
    # the rebuild's GETs are made together with those of the broker's other take-overs
    # running now (``tail.fetches``): joined before the claim, left at the latest here
    part = tail.fetches.join()
    try:
        entries = tail.claim(topic, partition, -1 if leader_epoch is None else leader_epoch)
        crashpoints.hit("take_over.after_claim")  # the next take-over claims again
        manifest = store.latest()
    except BaseException:
        part.leave()
        raise
    later = rebuild.past_active(manifest, entries)
    if leader_epoch is None:
        rebuild.materialize(fs, root, path, manifest, entries, also=later, participant=part)
        _commit_tail_rolls(fs, path, config, store, later, None, now_ms=now_ms, label=label)
        return recover(fs, path, config, store, now_ms=now_ms, label=label)
    # a take-over rebuilds the cache (ranged GETs of the round objects) on a thread of its
    # own while it commits its epoch and reads what does not come from the cache; a failed
    # take-over still waits for the rebuild (leaving the pool), so none outlives it
    with ThreadPoolExecutor(1, thread_name_prefix="sparklog-rebuild") as pool:
        building = pool.submit(
            rebuild.materialize, fs, root, path, manifest, entries, also=later, participant=part
        )
        return take_over(
            fs, path, config, store, leader_epoch, now_ms=now_ms, label=label,
            tail_rolls=later, read=manifest, rebuilt=building.result,
        )  # fmt: skip


def _commit_tail_rolls(
    fs: FileSystem,
    path: str,
    config: TopicConfig,
    store: ManifestStore,
    later: list[str],
    epoch: int | None,
    *,
    now_ms: int,
    label: str,
    current: Manifest | None = None,
) -> Manifest | None:
    """Commit the rolls to the segments ``later`` (``rebuild.past_active``, rebuilt in the
    cache): each segment before one of them rolled at its base, the size and timestamps
    read from its rebuilt file. A file that does not end where the next segment starts
    (corrupt) ends the chain there: the segments after it stay unnamed, orphans. ``later``
    was found on an older manifest version: segments a deposed leader's seal has named
    since (it carried some of these rolls) are left out.

    ``current``: the version the caller just committed (the take-over's ``EpochChange``,
    after which no older leader commits), used instead of reading the latest. Returns
    the version committed here, else ``current`` (None: the caller reads the latest)."""
    if not later:
        return current
    manifest = current if current is not None else store.latest()
    if manifest is None:
        return None
    active_base = manifest.active.base_offset
    later = [n for n in later if _base_offset(n) > active_base]
    if not later:
        return current
    chain = [manifest.active.name, *later]
    created = manifest.active.created_ms
    rolls: list[transforms.Roll] = []
    for name, following in itertools.pairwise(chain):
        seg, _ = ActiveSegment.open(fs, path, name, config.index_interval_bytes)
        seg.close()
        base = _base_offset(following)
        if seg.next_offset != base:
            log.error(
                "%s: %s ends at offset %d, its successor %s starts at %d: rolls past it "
                "are not committed",
                label,
                name,
                seg.next_offset,
                following,
                base,
            )
            break
        rolled = SegmentInfo(
            name,
            seg.base_offset,
            seg.next_offset,
            records=seg.next_offset - seg.base_offset,
            size_bytes=seg.size,
            max_timestamp=seg.max_timestamp,
            created_ms=created,
        )
        active = SegmentInfo(following, base, None, created_ms=now_ms)
        rolls.append(transforms.Roll(rolled, active))
        created = now_ms
    if not rolls:
        return current
    found: transforms.Transform = transforms.Rolled(tuple(rolls))
    committed = store.commit(
        found if epoch is None else transforms.Fenced(epoch, found, label), current=current
    )
    log.info("%s: committed %d roll(s) found in the tail", label, len(rolls))
    return committed


def _record_epoch(
    fs: FileSystem,
    path: str,
    epoch: int,
    start: int,
    history: list[tuple[int, int]] | None = None,
) -> None:
    """Add ``(epoch, start)`` to the leader-epoch history (OffsetForLeaderEpoch's answers);
    ``history``: the history as read earlier in the take-over (only the leader writes it,
    and the take-over is the leader's first step), else it is read here."""
    if history is None:
        history = checkpoints.read_leader_epochs(fs, path)
    if not history or history[-1][0] < epoch:
        checkpoints.write_leader_epochs(fs, path, [*history[-99:], (epoch, start)])


def producer_states(
    fs: FileSystem,
    path: str,
    *,
    log_start_offset: int,
    high_watermark: int,
    batches: Callable[[int, list[str]], Iterator[pa.RecordBatch]],
    manifest: Manifest | None = None,
    snapshot: ProducerStates | None = None,
) -> ProducerStates:
    """The partition's idempotent-producer state: the snapshot, then the records after it
    (``batches(start, PRODUCER_COLUMNS)`` yields them) replayed. On an object store the
    snapshot is the newer of the snapshot file (written at close) and the one in the
    footer of ``manifest``'s newest sealed segment (``sealed.PRODUCER_STATE_KEY``).
    ``snapshot``: that starting point, read already (``Recovered.snapshot``)."""
    states = snapshot if snapshot is not None else _read_snapshot(fs, path, manifest)
    start = max(states.covered_offset, log_start_offset)
    if start < high_watermark:
        states.replay(list(batches(start, PRODUCER_COLUMNS)))
    return states


def _read_snapshot(fs: FileSystem, path: str, manifest: Manifest | None) -> ProducerStates:
    """The newer of the snapshot file and the footer snapshot of ``manifest`` (object
    stores); empty states where there is neither."""
    states = read_snapshot(fs, path) or ProducerStates()
    footer = _footer_snapshot(fs, path, manifest) if manifest is not None else None
    if footer is not None and footer.covered_offset > states.covered_offset:
        states = footer
    return states


def _base_offset(name: str) -> int:
    parsed = names.parse_segment_name(name)
    assert parsed is not None, name
    return parsed.base_offset


#: how many sealed segments, newest first, are looked at for a footer's producer snapshot
FOOTER_SNAPSHOT_LOOKBACK = 8


def _footer_snapshot(fs: FileSystem, path: str, manifest: Manifest) -> ProducerStates | None:
    """The newest producer snapshot in the footers of ``manifest``'s sealed segments, on an
    object store: the newest segment's, else an older one's (a segment sealed by the next
    writer after a crash, or rewritten by compaction, carries none), up to
    ``FOOTER_SNAPSHOT_LOOKBACK`` segments back; None where there is none or it is
    unreadable (logged: the replay starts earlier)."""
    if not on_object_store(fs):
        return None
    sealed = [s for s in manifest.segments if s.sealed][-FOOTER_SNAPSHOT_LOOKBACK:]
    for info in reversed(sealed):
        try:
            segment = SealedSegment(fs, path, info.name)
        except (FileNotFoundError, CorruptSegmentError) as e:
            log.warning("%s: no producer snapshot from %s: %s", path, info.name, e)
            continue
        try:
            data = (segment.metadata.metadata or {}).get(PRODUCER_STATE_KEY.encode())
        finally:
            segment.close()
        if data is None:
            continue
        try:
            return ProducerStates.from_json(data, fs.join(path, info.name))
        except CorruptMetadataError as e:
            log.warning("%s; the replay starts from an older snapshot", e)
    return None
