"""The partition log: the single writer of one partition.

``PartitionLog`` appends record batches (offsets dense and monotonic; idempotent producers'
batches checked against the producer state, ``sparklog.storage.producers``), makes them
durable through its group commit (``sparklog.storage.durability``: one fsync serves every
append waiting on it, then the high-watermark checkpoint moves), rolls the active segment by
size and age, seals rolled segments into Parquet, and serves reads through
``sparklog.storage.reader.LogView``. Opening it recovers the directory
(``sparklog.storage.recovery``). Every change of the segment set is a named manifest
transform (``sparklog.storage.transforms``).

Roll (crash points in brackets; what ``open`` does after a crash there):
  1. fsync the active segment A; create the new active segment B (empty, header synced)
     [roll.after_new_file: B is an orphan .arrow file, deleted on open; A stays active]
  2. commit ``Roll``: A rolled (its end and size), B active
     [roll.after_commit: A is sealed on open, B is the active segment]
  3. move the high watermark into B; snapshot the producer state (it covers A's end).
On object storage step 1 waits for A's bytes to be committed to the tail, step 2 commits
nothing and step 3's snapshot goes to A's Parquet footer: A's seal carries both, in its
one manifest version and its one Parquet PUT (``sparklog.storage.rolls``).
Seal of a rolled segment A: ``sparklog.storage.sealing`` (the log's ``Sealer``: on a
background thread after a roll by ``append``; ``roll()`` seals before it returns).
Segment swaps of other processes (retention and compaction jobs commit ``DropSegments`` and
``Compact`` themselves) reach the log through ``refresh``.

Thread-safety: ``append`` and ``read`` may be called from many threads. ``_lock`` orders
appends and the producer state; the group commit's sync token makes fsyncs, rolls and
high-watermark moves one at a time, without blocking appends during an fsync.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pyarrow as pa

from sparklog.errors import LogClosedError, OffsetOutOfRangeError, RecordTooLargeError
from sparklog.storage import checkpoints, crashpoints, gc, names, recovery, transforms, txnindex
from sparklog.storage.active import FILE_HEADER_SIZE, ActiveSegment
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.config import TopicConfig
from sparklog.storage.durability import SYNC_TIMES, GroupCommit
from sparklog.storage.epochs import WriterEpochs
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.producers import ProducerBatch, ProducerStates, write_snapshot
from sparklog.storage.reader import DEFAULT_MAX_BYTES, LogView
from sparklog.storage.records import AppendResult, marker_batch, normalize, payload_bytes
from sparklog.storage.rolls import PendingRolls
from sparklog.storage.sealed import ROW_GROUP_ROWS, SealedSegment
from sparklog.storage.sealing import Sealer
from sparklog.storage.tail import BrokerTail, LogTail

log = logging.getLogger(__name__)
crashpoints.register("roll.after_new_file", "roll.after_commit")

ORPHAN_GRACE_MS = 3600 * 1000
_IPC_OVERHEAD = 1024


class PartitionLog:
    """See the module docstring. Create with ``PartitionLog.open``."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        label: str,
        config: TopicConfig,
        found: recovery.Recovered,
        *,
        clock: Callable[[], float],
        row_group_rows: int,
        auto_seal: bool,
        fence: Callable[[], None] | None = None,
    ) -> None:
        self.fs = fs
        self.path = path
        self.label = label
        self.config = config
        self._store = found.store
        self._manifest = found.manifest
        self._active = found.active
        self._clock = clock
        self._auto_seal = auto_seal
        self._lock = threading.RLock()
        active = found.active
        self._commit = GroupCommit(
            self._sync_step,
            LogPosition(active.base_offset, active.size, active.next_offset),
            label=label,
        )
        self._producers = ProducerStates()
        self._rolls = PendingRolls()  # object storage: rolls the next commit carries
        #: cluster mode: the leader epoch that names the files this writer creates
        self._segment_epoch = found.active_epoch
        self._fence = fence
        #: the writer's leader epoch, and whether another writer superseded it
        self.epochs = WriterEpochs(
            fs,
            path,
            label,
            found.store,
            found.manifest.leader_epoch,
            fenced=fence is not None,
            fail_waiting=self._commit.fail_waiting,
        )
        self._sealed_cache: dict[str, SealedSegment] = {}
        self._sealer = Sealer(
            fs,
            path,
            label,
            row_group_rows=row_group_rows,
            epoch=self._segment_epoch,
            latest=self.refresh,
            commit=self._commit_seal,
        )
        #: on object storage: this log's place in its broker's tail (set by ``open``)
        self._tail: LogTail | None = None
        self._roll_fsyncs = 0
        self._closed = False
        self._checkpoints = checkpoints.LogCheckpoints(fs, path)
        self.recovery = found.report

    # ------------------------------------------------------------------ open

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
        leader_epoch: int | None = None,
        fence: Callable[[], None] | None = None,
        tail: BrokerTail | None = None,
    ) -> PartitionLog:
        """Recover the partition (``sparklog.storage.recovery``) and open it for writing.

        Cluster mode (``leader_epoch``, the controller's) takes the partition over first
        (``recovery.take_over``); each group-commit round calls ``fence`` after its fsync,
        before the high watermark moves: it raises once another broker leads. On object
        storage (``tail``: the broker's; ``fs`` its tiered filesystem) the cache is rebuilt
        from the committed tail first (``recovery.open_partition``), and every round
        commits through the tail instead of an fsync and the fence."""
        config = config or TopicConfig()
        path = names.partition_dir(root, topic, partition)
        label = f"{topic}-{partition}"
        store = ManifestStore(fs, path, writer=writer or f"log:{os.getpid()}", clock=clock)
        now_ms = int(clock() * 1000)
        args = (fs, root, topic, partition, config, store)
        found = recovery.open_partition(*args, leader_epoch=leader_epoch, tail=tail, now_ms=now_ms)
        plog = cls(
            fs,
            path,
            label,
            config,
            found,
            clock=clock,
            row_group_rows=row_group_rows,
            auto_seal=auto_seal,
            fence=fence,
        )
        plog._write_hwm(plog._commit.durable)
        plog._checkpoints.recovery_point(plog._commit.durable)
        plog._producers = recovery.producer_states(
            fs, path, log_start_offset=plog.log_start_offset,
            high_watermark=plog.high_watermark,
            batches=lambda start, columns: plog.batches(start, columns=columns),
            manifest=plog.manifest, snapshot=found.snapshot,
        )  # fmt: skip
        if plog._producers.txn_version or txnindex.has_index(fs, path, found.listing):
            plog._write_txn_index(force=True)
        if tail is not None:
            plog._tail = tail.attach(topic, partition, plog.epochs.epoch, plog._active)
            plog._tail.drop_sealed(plog.manifest)
            plog._sealer.snapshot_frozen(plog.manifest, plog.high_watermark, plog._producers)
        if leader_epoch is None:
            plog.recovery.resealed = plog.seal_pending()
        elif plog.manifest.unsealed_rolled and auto_seal:  # a take-over serves first
            plog._sealer.seal_in_background()
        if tail is None:  # on object storage the broker's maintenance collects, off the take-over
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
        return self._commit.durable.offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned (appended, maybe not yet durable)."""
        return self._active.next_offset

    @property
    def active_bytes(self) -> int:
        """The size of the active segment (appended, maybe not yet durable)."""
        return self._active.end[0]

    @property
    def fsync_count(self) -> int:
        """Segment fsyncs so far: group commits and rolls."""
        return self._commit.fsync_count + self._roll_fsyncs

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def reconfigure(self, config: TopicConfig) -> None:
        """Use changed topic configs from the next append (the index interval: next roll)."""
        with self._lock:
            self.config = config

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.label}: the log is closed")
        if self.epochs.superseded is not None:
            raise self.epochs.superseded

    # ------------------------------------------------------------------ append / durability

    def append(
        self,
        records: pa.RecordBatch | pa.Table,
        *,
        producer: ProducerBatch | None = None,
        durable: bool = True,
        codec: int = 0,
    ) -> AppendResult:
        """Append ``records`` (see ``sparklog.storage.records``); with ``durable`` return only
        once they are fsynced and visible to readers. ``producer``: the batch of an
        idempotent producer, checked first (a retry of a recent batch is answered with its
        original offsets and not written; the producer errors of ``sparklog.errors`` refuse
        the others). ``codec``: the Kafka codec the records were produced with, kept."""
        now = self._now_ms()
        rolled = False
        with self._lock:
            self._check_open()
            if producer is not None:
                dup = self._producers.check_batch(producer, self.label)
                if dup is not None:
                    return AppendResult(dup.first_offset, dup.last_offset, duplicate=True)
            incoming = records.nbytes + _IPC_OVERHEAD
            if self._should_roll(incoming, now):
                self._roll_locked(now)
                rolled = True
            base = self._active.next_offset
            batch = normalize(
                records,
                base_offset=base,
                now_ms=now,
                producer=producer,
                log_append_time=self.config.log_append_time,
                codec=codec,
            )
            size = payload_bytes(batch)
            if size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"{self.label}: batch of {batch.num_rows} records is {size} bytes; "
                    f"max.message.bytes is {self.config.max_message_bytes}"
                )
            h = self._active.append(batch)
            if self._tail is not None:
                self._tail.appended(h.end - h.position)
            if producer is not None:
                self._producers.record_batch(producer, base)
            else:
                self._producers.covered_offset = h.next_offset
        append_time = now if self.config.log_append_time else -1
        result = AppendResult(base, h.next_offset - 1, append_time, rolled=rolled)
        if rolled and self._auto_seal:
            self._sealer.seal_in_background()
        if durable:
            self.wait_durable(h.next_offset)
        return result

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        durable: bool = True,
    ) -> AppendResult:
        """Append a transaction marker (``records.marker_batch``): the producer's open
        transaction here ends. One below the producer's epoch is refused."""
        now = self._now_ms()
        with self._lock:
            self._check_open()
            self._producers.check_marker(producer_id, producer_epoch, self.label)
            if self._should_roll(1024, now):
                self._roll_locked(now)
            base = self._active.next_offset
            batch = marker_batch(
                producer_id,
                producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                base_offset=base,
                now_ms=now,
                log_append_time=self.config.log_append_time,
            )
            h = self._active.append(batch)
            if self._tail is not None:
                self._tail.appended(h.end - h.position)
            self._producers.marker(producer_id, producer_epoch, commit, base)
        if durable:
            self.wait_durable(h.next_offset)
        return AppendResult(base, base)

    def producers(self) -> list[tuple[int, int, int, int]]:  # ProducerStates.describe
        with self._lock:
            return self._producers.describe()

    def _should_roll(self, incoming: int, now_ms: int) -> bool:
        seg, age_ms = self._active, now_ms - self._manifest.active.created_ms
        if seg.frame_count == 0:
            return False
        full = self._tail is not None and self._tail.full()  # too many chunks to rebuild
        return seg.legacy or full or self.config.rolls(seg.size + incoming, age_ms)

    def confirm_leadership(self) -> None:
        """Run the fence (cluster mode): NotLeaderError once another broker leads."""
        if self._fence is not None:
            self._fence()

    def wait_durable(self, next_offset: int) -> None:
        """Block until every offset below ``next_offset`` is fsynced (group commit)."""
        self._commit.wait(next_offset)

    def durable_future(self, next_offset: int) -> Future[None]:
        """A future resolved once every offset below ``next_offset`` is fsynced."""
        return self._commit.future(next_offset)

    def on_durable(self, listener: Callable[[LogPosition], None]) -> None:
        """Call ``listener`` (on the syncing thread) whenever the high watermark moves."""
        self._commit.on_durable(listener)

    def sync(self) -> None:
        """Make everything appended so far durable."""
        self.wait_durable(self.log_end_offset)

    def _sync_step(self) -> LogPosition:
        """The group commit's step, run holding the sync token (a roll needs it, so the
        active segment stays; no append lock): fsync up to the end, move the checkpoint."""
        seg = self._active
        size, next_offset = seg.end
        if self._tail is not None:  # committed in a round, whose commit is also the fence
            upto = self._tail.wait(next_offset)
        else:
            with SYNC_TIMES.timed():
                seg.sync()
            if self._fence is not None:
                self._fence()  # raises once another broker leads: nothing becomes visible
            self.epochs.check(self._manifest.version)  # another writer: nothing visible
            upto = LogPosition(seg.base_offset, size, next_offset)
        self._write_txn_index()
        self._write_hwm(upto)
        return upto

    def _write_txn_index(self, force: bool = False) -> None:
        self._checkpoints.txn_index(self._active.name, self._producers.txn_state(), force)

    def _write_hwm(self, pos: LogPosition) -> None:
        self._checkpoints.high_watermark(self._active.name, pos)

    # ------------------------------------------------------------------ roll / seal

    def seal_pending(self) -> list[str]:
        """Seal every rolled segment into Parquet (``Sealer.seal_pending``)."""
        return self._sealer.seal_pending()

    def wait_sealed(self) -> None:
        """Wait for background seals started so far (exceptions are re-raised)."""
        self._sealer.wait()

    def roll(self, *, if_due: bool = False) -> None:
        """Roll the active segment now (if it holds any record); with ``if_due`` only once
        ``segment.ms`` has passed, appended to or not (a quiet partition seals)."""
        with self._lock:
            self._check_open()
            if self._active.frame_count and (not if_due or self._should_roll(0, self._now_ms())):
                self._roll_locked(self._now_ms())
        if self._auto_seal:
            self.seal_pending()

    def _roll_locked(self, now_ms: int) -> None:
        with self._commit.exclusive() as moved_to:
            old = self._active
            if self._tail is not None:
                self._tail.wait(old.next_offset)  # every byte of it committed
            else:
                old.sync()
                self._roll_fsyncs += 1
            new_base = old.next_offset
            new = ActiveSegment.create(
                self.fs,
                self.path,
                new_base,
                self.config.index_interval_bytes,
                epoch=self._segment_epoch,
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
            active = SegmentInfo(new.name, new_base, None, created_ms=now_ms)
            if self._tail is None:
                self._commit_fenced(transforms.Roll(rolled, active))
                crashpoints.hit("roll.after_commit")
            else:  # the seal's commit carries it (sparklog.storage.rolls)
                self._manifest = self._rolls.add(transforms.Roll(rolled, active), self._manifest)
            self._active = new
            if self._tail is not None:
                self._tail.switch(new)
            old.close()
            position = LogPosition(new_base, FILE_HEADER_SIZE, new_base)
            self._write_hwm(position)
            self._checkpoints.recovery_point(position)
            moved_to(position)
            # everything below new_base is durable: a replay after a crash starts here
            self._sealer.snapshot_at_roll(old.name, self._producers)

    # ------------------------------------------------------------------ manifest changes

    def bump_leader_epoch(self) -> int:
        """Start a new leader epoch at the log end offset (``WriterEpochs.bump``)."""
        with self._lock:
            bumped = self.epochs.bump(self._manifest, self.log_end_offset)
            self._manifest = self._rolls.apply(bumped)
            return self.epochs.epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer (``WriterEpochs.end_offset_for_epoch``)."""
        return self.epochs.end_offset_for_epoch(epoch, self.high_watermark)

    def _commit_fenced(self, transform: transforms.Transform) -> Manifest:
        """Commit a writer's transform (the sealer's too), refused once a newer leader
        epoch committed; the result becomes this log's manifest."""
        with self._lock:
            carried = self._rolls.carried(transform)
            self._manifest = self._store.commit(self.epochs.fenced(carried))
            self._rolls.committed()
            return self._manifest

    def _commit_seal(self, transform: transforms.Transform) -> Manifest:
        """Commit a seal; on object storage drop the tail's chunks it made redundant."""
        manifest = self._commit_fenced(transform)
        if self._tail is not None:
            self._tail.drop_sealed(manifest)
        return manifest

    def refresh(self) -> Manifest:
        """Pick up manifest versions committed by others (compaction, retention jobs). Open
        sealed segments the new version no longer names leave the cache (a view reading
        one keeps its reference; the file stays for ``file.delete.delay.ms``)."""
        with self._lock:
            latest = self._store.latest()
            if latest is not None and latest.version > self._manifest.version:
                self.epochs.note_newer(latest)
                self._manifest = self._rolls.apply(latest)
                live = latest.names()
                for name in [n for n in self._sealed_cache if n not in live]:
                    del self._sealed_cache[name]
                self._producers.trim(latest.log_start_offset)
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
            self._commit_fenced(transforms.DeleteRecords(before_offset))
            self._producers.trim(self._manifest.log_start_offset)
            return self._manifest.log_start_offset

    def collect_garbage(self, orphan_grace_ms: int = ORPHAN_GRACE_MS) -> gc.GcReport:
        if self.epochs.superseded is not None:  # the files are another writer's now
            return gc.GcReport()
        return gc.collect_garbage(
            self.fs,
            self.path,
            self._store,
            now_ms=self._now_ms(),
            delete_delay_ms=self.config.file_delete_delay_ms,
            orphan_grace_ms=orphan_grace_ms,
            keep=self._manifest.names(),  # with segments of rolls not committed yet
        )

    # ------------------------------------------------------------------ reads

    def view(self) -> LogView:
        with self._lock:
            _, first, aborted = self._producers.txn_state()
            return LogView(
                self.fs,
                self.path,
                self._manifest,
                self._commit.durable,
                active=self._active,
                sealed_cache=self._sealed_cache,
                label=self.label,
                txn=txnindex.TxnIndex(first, aborted),
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

    def batches(
        self, start_offset: int, end_offset: int | None = None, *, columns: list[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        return self.view().batches(start_offset, end_offset, columns=columns)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self.view().offset_for_timestamp(timestamp_ms)

    # ------------------------------------------------------------------ close

    def abandon(self, error: Exception) -> None:
        """Give the partition up, writing nothing (another broker leads it now): appends
        waiting for durability fail with ``error``; files are released."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._tail is not None:
            self._tail.fail(error)
        self._commit.fail_waiting(error)
        with self._lock:
            self._release_files()

    def _release_files(self) -> None:
        self._active.close()
        for seg in self._sealed_cache.values():
            seg.close()
        self._sealed_cache.clear()

    def close(self) -> None:
        """Wait for background seals, make everything durable, record the recovery point
        and the producer snapshot, release files. A superseded log (``superseded``) writes
        nothing: the files are another writer's now."""
        if self.epochs.superseded is not None:
            self.abandon(self.epochs.superseded)
            return
        for f in self._sealer.pending():  # outside _lock: a seal takes it to commit
            with contextlib.suppress(Exception):  # logged by the sealer; open() seals again
                f.result()
        with self._lock:
            if self._closed:
                return
            self.sync()
            self._checkpoints.recovery_point(self._commit.durable)
            self._producers.covered_offset = self.log_end_offset
            write_snapshot(self.fs, self.path, self._producers)
            self._closed = True
            if self._tail is not None:
                self._tail.fail(LogClosedError(f"{self.label}: the log is closed"))
            self._release_files()
