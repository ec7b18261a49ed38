"""The partition log: the single writer of one partition.

``PartitionLog`` appends record batches (offsets dense and monotonic), makes them durable
with group commit (one fsync serves every append waiting on it, then the high-watermark
checkpoint moves), rolls the active segment by size and age, seals rolled segments into
Parquet, and serves reads through ``sparklog.storage.reader.LogView``.

Roll (crash points in brackets; what ``open`` does after a crash there):
  1. fsync the active segment A; create the new active segment B (empty, header synced)
     [roll.after_new_file: B is an orphan .arrow file, deleted on open; A stays active]
  2. commit a manifest version naming A rolled (its end and size) and B active
     [roll.after_commit: A is sealed on open, B is the active segment]
  3. move the high watermark into B.
Seal of a rolled segment A (``seal_pending``; after a roll triggered by ``append`` it runs on
a background thread, ``roll()`` seals before returning):
  1. write ``A.parquet`` + indexes, fsynced         [seal.after_write: orphan, deleted on open,
                                                     then the seal is redone]
  2. commit a version replacing A.arrow by A.parquet [seal.after_commit: A.arrow is garbage,
                                                     deleted after file.delete.delay.ms]
Swap (``replace_segments``, used by compaction and retention jobs):
  1. the caller writes the new segments                [replace.after_write: orphans]
  2. commit a version swapping old for new             [replace.after_commit: old are garbage]

Open (recovery): delete temporary files and orphan .arrow files (only this writer makes
them); redo unfinished seals; truncate a torn or corrupt tail of the active segment to its
longest valid prefix; rebuild the active segment's indexes; write the checkpoints.

Thread-safety: ``append`` and ``read`` may be called from many threads. ``_lock`` orders
appends; a "sync token" (``_syncing`` under ``_cond``) makes fsyncs, rolls and high-watermark
moves one at a time, without blocking appends during an fsync.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from sparklog.errors import (
    CorruptSegmentError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from sparklog.storage import checkpoints, crashpoints, gc, names
from sparklog.storage.active import FILE_HEADER_SIZE, ActiveSegment, decode_frame, scan
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.reader import DEFAULT_MAX_BYTES, LogView
from sparklog.storage.records import normalize, payload_bytes
from sparklog.storage.sealed import ROW_GROUP_ROWS, SealedSegment, write_sealed

log = logging.getLogger(__name__)

ORPHAN_GRACE_MS = 3600 * 1000
_IPC_OVERHEAD = 1024

_sealer: ThreadPoolExecutor | None = None
_sealer_lock = threading.Lock()


def _background_sealer() -> ThreadPoolExecutor:
    """One sealing thread per process, shared by every log: sealing is Parquet encoding
    (zstd), which releases the GIL and runs beside appends; one at a time bounds its CPU."""
    global _sealer
    with _sealer_lock:
        if _sealer is None:
            _sealer = ThreadPoolExecutor(1, thread_name_prefix="sparklog-seal")
        return _sealer


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int = -1


@dataclass
class RecoveryReport:
    """What ``PartitionLog.open`` found and repaired."""

    truncated_bytes: int = 0
    lost_acknowledged: bool = False
    resealed: list[str] = field(default_factory=list)
    deleted_orphans: list[str] = field(default_factory=list)


class PartitionLog:
    """See the module docstring. Create with ``PartitionLog.open``."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        label: str,
        config: TopicConfig,
        store: ManifestStore,
        manifest: Manifest,
        active: ActiveSegment,
        *,
        clock: Callable[[], float],
        row_group_rows: int,
        auto_seal: bool,
    ) -> None:
        self.fs = fs
        self.path = path
        self.label = label
        self.config = config
        self._store = store
        self._manifest = manifest
        self._active = active
        self._clock = clock
        self._row_group_rows = row_group_rows
        self._auto_seal = auto_seal
        self._lock = threading.RLock()
        self._cond = threading.Condition()
        self._seal_lock = threading.Lock()
        self._syncing = False
        self._durable = LogPosition(active.base_offset, active.size, active.next_offset)
        self._sealed_cache: dict[str, SealedSegment] = {}
        self._seals: list[Future[list[str]]] = []
        self._closed = False
        self.fsync_count = 0
        self.recovery = RecoveryReport()

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        root: str,
        topic: str,
        partition: int,
        config: TopicConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        row_group_rows: int = ROW_GROUP_ROWS,
        auto_seal: bool = True,
        writer: str = "",
    ) -> PartitionLog:
        config = config or TopicConfig()
        path = names.partition_dir(root, topic, partition)
        label = f"{topic}-{partition}"
        fs.makedirs(names.manifest_dir(path))
        store = ManifestStore(fs, path, writer=writer or f"log:{os.getpid()}", clock=clock)
        report = RecoveryReport()
        for name in fs.listdir(path):
            if name.startswith(names.TMP_PREFIX):
                fs.delete(fs.join(path, name))
        manifest = store.latest()
        now = int(clock() * 1000)
        if manifest is None:
            info = SegmentInfo(
                names.segment_name(0, kind=names.ACTIVE_KIND), 0, None, created_ms=now
            )
            ActiveSegment.create(fs, path, 0, config.index_interval_bytes)
            manifest = store.create_initial(Manifest(0, 0, (info,)))
        live = manifest.names()
        unsealed = {s.base_offset for s in manifest.unsealed_rolled}
        for name in fs.listdir(path):
            seg = names.parse_segment_name(name)
            if seg is None or name in live:
                continue
            # an .arrow file past the active one is a roll that never committed; older
            # unnamed .arrow files were sealed and wait out file.delete.delay.ms in gc
            orphan_arrow = (
                seg.kind == names.ACTIVE_KIND and seg.base_offset > manifest.active.base_offset
            )
            orphan_seal = seg.generation == 0 and seg.base_offset in unsealed
            if orphan_arrow or orphan_seal:
                for n in (name, names.offset_index_name(name), names.time_index_name(name)):
                    fs.delete(fs.join(path, n))
                report.deleted_orphans.append(name)
        active, truncated = ActiveSegment.open(
            fs, path, manifest.active.base_offset, config.index_interval_bytes
        )
        report.truncated_bytes = truncated
        # Data below the recovery point, or below a surviving high-watermark checkpoint
        # (written only after an fsync), was acknowledged: losing it is not a torn tail.
        acked = [
            p.position
            for p in (
                _read_position_or_none(fs, path, names.RECOVERY_POINT_FILE),
                _read_position_or_none(fs, path, names.HIGH_WATERMARK_FILE),
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
        plog = cls(
            fs,
            path,
            label,
            config,
            store,
            manifest,
            active,
            clock=clock,
            row_group_rows=row_group_rows,
            auto_seal=auto_seal,
        )
        plog.recovery = report
        plog._write_hwm(plog._durable)
        plog._write_recovery_point()
        report.resealed = plog.seal_pending()
        plog.collect_garbage()
        return plog

    # ------------------------------------------------------------------ properties

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def log_start_offset(self) -> int:
        return self._manifest.log_start_offset

    @property
    def high_watermark(self) -> int:
        """The first offset not yet durable (Kafka's high watermark)."""
        return self._durable.offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned (appended, maybe not yet durable)."""
        return self._active.next_offset

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.label}: the log is closed")

    # ------------------------------------------------------------------ append / sync

    def append(self, records: pa.RecordBatch | pa.Table, *, durable: bool = True) -> AppendResult:
        """Append ``records`` (see ``sparklog.storage.records``); with ``durable`` return only
        once they are fsynced and visible to readers."""
        now = self._now_ms()
        rolled = False
        with self._lock:
            self._check_open()
            incoming = records.nbytes + _IPC_OVERHEAD
            if self._should_roll(incoming, now):
                self._roll_locked(now)
                rolled = True
            base = self._active.next_offset
            batch = normalize(
                records, base_offset=base, now_ms=now, log_append_time=self.config.log_append_time
            )
            size = payload_bytes(batch)
            if size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"{self.label}: batch of {batch.num_rows} records is {size} bytes; "
                    f"max.message.bytes is {self.config.max_message_bytes}"
                )
            h = self._active.append(batch)
        result = AppendResult(base, h.next_offset - 1, now if self.config.log_append_time else -1)
        if rolled and self._auto_seal:
            self._seal_in_background()
        if durable:
            self.wait_durable(h.next_offset)
        return result

    def _should_roll(self, incoming: int, now_ms: int) -> bool:
        seg = self._active
        if seg.frame_count == 0:
            return False
        if seg.size + incoming > self.config.segment_bytes:
            return True
        created = self._manifest.active.created_ms
        return now_ms - created >= self.config.segment_ms

    def wait_durable(self, next_offset: int) -> None:
        """Block until every offset below ``next_offset`` is fsynced (group commit)."""
        while True:
            with self._lock:
                seg = self._active
                upto = LogPosition(seg.base_offset, seg.size, seg.next_offset)
            with self._cond:
                while self._syncing and self._durable.offset < next_offset:
                    self._cond.wait()
                if self._durable.offset >= next_offset:
                    return
                self._syncing = True
            done = self._durable
            try:
                if seg is self._active or seg.base_offset == self._durable.segment:
                    seg.sync()
                    self.fsync_count += 1
                    self._write_hwm(upto)
                    done = upto
            finally:
                with self._cond:
                    if done.offset > self._durable.offset:
                        self._durable = done
                    self._syncing = False
                    self._cond.notify_all()
            if done.offset >= next_offset:
                return

    def sync(self) -> None:
        """Make everything appended so far durable."""
        self.wait_durable(self.log_end_offset)

    def _write_hwm(self, pos: LogPosition) -> None:
        checkpoints.write_position(self.fs, self.path, names.HIGH_WATERMARK_FILE, pos)

    def _write_recovery_point(self) -> None:
        checkpoints.write_position(self.fs, self.path, names.RECOVERY_POINT_FILE, self._durable)

    # ------------------------------------------------------------------ roll / seal

    def roll(self) -> None:
        """Roll the active segment now (if it holds any record)."""
        with self._lock:
            self._check_open()
            if self._active.frame_count:
                self._roll_locked(self._now_ms())
        if self._auto_seal:
            self.seal_pending()

    def _take_sync_token(self) -> None:
        with self._cond:
            while self._syncing:
                self._cond.wait()
            self._syncing = True

    def _give_sync_token(self, durable: LogPosition | None) -> None:
        with self._cond:
            if durable is not None:
                self._durable = durable
            self._syncing = False
            self._cond.notify_all()

    def _roll_locked(self, now_ms: int) -> None:
        self._take_sync_token()
        new_durable = None
        try:
            old = self._active
            old.sync()
            self.fsync_count += 1
            new_base = old.next_offset
            new = ActiveSegment.create(
                self.fs, self.path, new_base, self.config.index_interval_bytes
            )
            crashpoints.hit("roll.after_new_file")
            rolled = SegmentInfo(
                old.name,
                old.base_offset,
                new_base,
                records=new_base - old.base_offset,
                size_bytes=old.size,
                max_timestamp=old.max_timestamp,
                created_ms=self._manifest.active.created_ms,
            )
            new_info = SegmentInfo(new.name, new_base, None, created_ms=now_ms)

            def transform(m: Manifest) -> Manifest:
                return m.replace([old.name], [rolled, new_info])

            self._manifest = self._store.commit(transform)
            crashpoints.hit("roll.after_commit")
            self._active = new
            old.close()
            new_durable = LogPosition(new_base, FILE_HEADER_SIZE, new_base)
            self._write_hwm(new_durable)
            checkpoints.write_position(self.fs, self.path, names.RECOVERY_POINT_FILE, new_durable)
        finally:
            self._give_sync_token(new_durable)

    def _seal_in_background(self) -> None:
        def run() -> list[str]:
            try:
                return self.seal_pending()
            except Exception:
                # the segment stays rolled and readable as .arrow; the next roll or open
                # seals it again
                log.exception("%s: sealing failed", self.label)
                raise

        with self._lock:
            self._seals = [f for f in self._seals if not f.done()]
            self._seals.append(_background_sealer().submit(run))

    def wait_sealed(self) -> None:
        """Wait for background seals started so far (exceptions are re-raised)."""
        with self._lock:
            pending = list(self._seals)
        for f in pending:
            f.result()

    def seal_pending(self) -> list[str]:
        """Seal every rolled segment into Parquet; returns the names of the new files."""
        sealed = []
        with self._seal_lock:
            for info in self.refresh().unsealed_rolled:
                sealed.append(self._seal(info))
        return sealed

    def _seal(self, info: SegmentInfo) -> str:
        src = self.fs.join(self.path, info.name)
        buf = self.fs.read_buffer(src)
        frames = scan(buf, info.base_offset)
        end = frames[-1].next_offset if frames else info.base_offset
        if end != info.next_offset:
            raise CorruptSegmentError(
                f"{src}: rolled segment holds offsets up to {end - 1}, manifest says "
                f"{info.next_offset - 1 if info.next_offset else '?'}"
            )
        name = names.segment_name(info.base_offset, kind=names.SEALED_KIND)
        stats = write_sealed(
            self.fs,
            self.path,
            name,
            (decode_frame(buf, h) for h in frames),
            row_group_rows=self._row_group_rows,
        )
        del buf
        crashpoints.hit("seal.after_write")
        new = dataclasses.replace(
            info,
            name=name,
            records=stats.records,
            size_bytes=stats.size_bytes,
            min_timestamp=stats.min_timestamp,
            max_timestamp=stats.max_timestamp,
        )
        with self._lock:
            self._manifest = self._store.commit(lambda m: m.replace([info.name], [new]))
        crashpoints.hit("seal.after_commit")
        return name

    # ------------------------------------------------------------------ manifest changes

    def refresh(self) -> Manifest:
        """Pick up manifest versions committed by others (compaction, retention jobs).

        Open sealed segments the new version no longer names leave the cache (a view still
        reading one keeps its own reference; the file stays on disk for
        ``file.delete.delay.ms``)."""
        with self._lock:
            latest = self._store.latest()
            if latest is not None and latest.version > self._manifest.version:
                self._manifest = latest
                live = latest.names()
                for name in [n for n in self._sealed_cache if n not in live]:
                    del self._sealed_cache[name]
            return self._manifest

    def replace_segments(
        self,
        old: Iterable[str],
        new: Iterable[SegmentInfo],
        *,
        log_start_offset: int | None = None,
    ) -> Manifest:
        """Swap live segments ``old`` for already-written ``new`` ones in one manifest commit.

        The crash points are in the module docstring. Raises SegmentNotLiveError if any of
        ``old`` was swapped out meanwhile; the new files are then orphans.
        """
        old, new = list(old), list(new)
        with self._lock:
            self._check_open()
            self._manifest = self._store.commit(
                lambda m: m.replace(old, new, log_start_offset=log_start_offset)
            )
            crashpoints.hit("replace.after_commit")
            return self._manifest

    def delete_records(self, before_offset: int) -> int:
        """Advance the log start offset to ``before_offset`` (Kafka's DeleteRecords);
        returns the new log start offset."""
        with self._lock:
            self._check_open()
            if before_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.label}: cannot delete records before {before_offset}, above the "
                    f"high watermark {self.high_watermark}"
                )

            def transform(m: Manifest) -> Manifest | None:
                if before_offset <= m.log_start_offset:
                    return None
                return dataclasses.replace(m, log_start_offset=before_offset)

            self._manifest = self._store.commit(transform)
            return self._manifest.log_start_offset

    def collect_garbage(self, orphan_grace_ms: int = ORPHAN_GRACE_MS) -> gc.GcReport:
        return gc.collect_garbage(
            self.fs,
            self.path,
            self._store,
            now_ms=self._now_ms(),
            delete_delay_ms=self.config.file_delete_delay_ms,
            orphan_grace_ms=orphan_grace_ms,
        )

    # ------------------------------------------------------------------ reads

    def view(self) -> LogView:
        with self._lock:
            return LogView(
                self.fs,
                self.path,
                self._manifest,
                self._durable,
                active=self._active,
                sealed_cache=self._sealed_cache,
                label=self.label,
            )

    def read(
        self,
        start_offset: int,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        end_offset: int | None = None,
    ) -> list[pa.RecordBatch]:
        """Visible records from ``start_offset`` (see ``LogView.read``)."""
        return self.view().read(start_offset, max_bytes=max_bytes, end_offset=end_offset)

    def batches(self, start_offset: int, end_offset: int | None = None) -> Iterator[pa.RecordBatch]:
        return self.view().batches(start_offset, end_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self.view().offset_for_timestamp(timestamp_ms)

    # ------------------------------------------------------------------ leader epochs

    def leader_epochs(self) -> list[tuple[int, int]]:
        return checkpoints.read_leader_epochs(self.fs, self.path)

    def bump_leader_epoch(self) -> int:
        """Start a new leader epoch at the log end offset; returns it."""
        with self._lock:
            epochs = self.leader_epochs()
            epoch = epochs[-1][0] + 1 if epochs else 0
            checkpoints.write_leader_epochs(
                self.fs, self.path, [*epochs[-99:], (epoch, self.log_end_offset)]
            )
            return epoch

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Wait for background seals, make everything durable, record the recovery point,
        release files."""
        with self._lock:
            pending = list(self._seals)
        for f in pending:  # outside _lock: a seal takes it to commit
            with contextlib.suppress(Exception):  # logged by the sealer; open() seals again
                f.result()
        with self._lock:
            if self._closed:
                return
            self.sync()
            self._write_recovery_point()
            self._closed = True
            self._active.close()
            for seg in self._sealed_cache.values():
                seg.close()
            self._sealed_cache.clear()


def _read_position_or_none(fs: FileSystem, path: str, name: str) -> LogPosition | None:
    try:
        return checkpoints.read_position(fs, path, name)
    except Exception:  # an unreadable checkpoint only costs the "lost acknowledged" hint
        return None
