"""Reading a partition: a consistent view of (manifest version, high watermark).

``LogView`` serves every read: the broker's (through ``PartitionLog``, which hands it the
live active segment) and out-of-process readers' such as Spark executors (through
``PartitionReader``, which reads the manifest, then the high-watermark checkpoint of its
active segment, and reads again if the watermark points past that segment). Nothing at or past
the high watermark is ever returned. Readers take no locks: the files a view names stay on
disk for ``file.delete.delay.ms`` after a newer manifest drops them.

A root on an object store (``versioned.on_object_store``; ``reads_tail`` says no) holds the
manifests, the sealed Parquet segments and the transaction index, but not a writer's
``.arrow`` segments, their indexes or its high-watermark checkpoint: those stay in the
writer's own cache directory. A ``PartitionReader`` there sees the log up to the end of
the manifest's sealed prefix (``sealed_end``: the run of sealed segments from its start),
which is then the view's high watermark; the rolled and active segments after it are not
visible yet, and nothing is requested for them (no error either).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import CorruptMetadataError, CorruptSegmentError, OffsetOutOfRangeError
from sparklog.storage import active as active_fmt
from sparklog.storage import checkpoints, names
from sparklog.storage.active import ActiveSegment
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.fs import FileSystem
from sparklog.storage.index import OffsetIndex, TimeIndex
from sparklog.storage.manifest import Manifest, ManifestStore, SegmentInfo
from sparklog.storage.sealed import SealedSegment
from sparklog.storage.txnindex import NO_TRANSACTIONS, TxnIndex, read_txn_index, visible
from sparklog.storage.versioned import on_object_store

DEFAULT_MAX_BYTES = 1024 * 1024


def reads_tail(fs: FileSystem) -> bool:
    """Whether a reader of a root on ``fs`` sees the ``.arrow`` tail of a log (a disk:
    yes; an object store: no, see the module docstring)."""
    return not on_object_store(fs)


def active_segment_bytes(fs: FileSystem, partition_path: str, active_segment: str) -> int:
    """The active segment's bytes as retention counts them (``retention.bytes``):
    ``checkpoints.active_segment_bytes`` where readers see the tail; 0 on an object store,
    where the segment is not in the bucket (nothing is requested for it)."""
    if not reads_tail(fs):
        return 0
    return checkpoints.active_segment_bytes(fs, partition_path, active_segment)


def sealed_end(manifest: Manifest) -> int:
    """The end of the manifest's sealed prefix: the next offset after the run of sealed
    segments from its start (its first segment's base offset if that one is not sealed)."""
    end = manifest.segments[0].base_offset
    for info in manifest.segments:
        if not info.sealed or info.next_offset is None:
            break
        end = info.next_offset
    return end


class LogView:
    """A read-only view of one partition at one manifest version and high watermark."""

    def __init__(
        self,
        fs: FileSystem,
        partition_path: str,
        manifest: Manifest,
        hwm: LogPosition,
        *,
        active: ActiveSegment | None = None,
        sealed_cache: dict[str, SealedSegment] | None = None,
        label: str = "",
        verify_checksums: bool = True,
        txn: TxnIndex = NO_TRANSACTIONS,
        committed: bool = False,
    ) -> None:
        self.fs = fs
        self.path = partition_path
        self.manifest = manifest
        self.hwm = hwm
        #: the partition's transactions as of ``hwm`` (``sparklog.storage.txnindex``)
        self.txn = txn
        #: a ``read_committed`` view: it ends at the last stable offset, which is then its
        #: ``high_watermark``, and ``visible`` drops aborted records
        self.committed = committed
        self._active = active
        self._sealed = sealed_cache if sealed_cache is not None else {}
        self.label = label or partition_path
        self.verify_checksums = verify_checksums

    @property
    def log_start_offset(self) -> int:
        return self.manifest.log_start_offset

    @property
    def high_watermark(self) -> int:
        """The end of what this view reads: the high watermark, or for a ``committed``
        view the last stable offset."""
        return self.last_stable_offset if self.committed else self.hwm.offset

    @property
    def last_stable_offset(self) -> int:
        """Where ``read_committed`` reads stop: the oldest open transaction's first offset,
        or the high watermark."""
        return self.txn.last_stable_offset(self.hwm.offset)

    def visible(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` as a consumer of this view sees it (``txnindex.visible``)."""
        return visible(batch, self.txn, committed=self.committed)

    def _sealed_segment(self, name: str) -> SealedSegment:
        seg = self._sealed.get(name)
        if seg is None:
            seg = SealedSegment(self.fs, self.path, name, verify_checksums=self.verify_checksums)
            self._sealed[name] = seg
        return seg

    def _arrow_batches(self, info: SegmentInfo, start: int) -> Iterator[pa.RecordBatch]:
        if self._active is not None and self._active.base_offset == info.base_offset:
            end_pos = self.hwm.position if self.hwm.segment == info.base_offset else 0
            if info.next_offset is not None:
                end_pos = info.size_bytes
            yield from self._active.read(start, end_pos)
            return
        if info.next_offset is not None:
            end_pos = info.size_bytes
        elif self.hwm.segment == info.base_offset:
            end_pos = self.hwm.position
        else:
            return
        path = self.fs.join(self.path, info.name)
        index = OffsetIndex.load(
            self.fs, self.fs.join(self.path, names.offset_index_name(info.name))
        )
        buf = self.fs.read_buffer(path)
        if buf.size < end_pos:
            raise CorruptSegmentError(f"{path}: {buf.size} bytes on disk, {end_pos} committed")
        yield from active_fmt.read_frames(
            buf,
            base_offset=info.base_offset,
            start_offset=start,
            end_position=end_pos,
            index=index,
            path=path,
        )

    def _segment_batches(
        self, info: SegmentInfo, start: int, end: int, columns: list[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        if info.sealed:
            yield from self._sealed_segment(info.name).read(start, end, columns=columns)
            return
        for batch in self._arrow_batches(info, start):
            if columns is not None:
                batch = batch.select(columns)
            offsets = batch.column("offset")
            first = offsets[0].as_py()
            if first >= end:
                return
            last = offsets[batch.num_rows - 1].as_py()
            if last >= end:
                yield batch.slice(0, end - first)
                return
            yield batch

    def check_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.label}: offset {offset} is outside [{self.log_start_offset}, "
                f"{self.high_watermark}]"
            )

    def batches(
        self,
        start_offset: int,
        end_offset: int | None = None,
        *,
        columns: list[str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Every visible record with ``start_offset <= offset < end_offset``, in order;
        only ``columns`` (which must include ``offset``) if given."""
        self.check_offset(start_offset)
        end = self.high_watermark if end_offset is None else min(end_offset, self.high_watermark)
        if start_offset >= end:
            return
        for info in self.manifest.segments:
            if info.next_offset is not None and info.next_offset <= start_offset:
                continue
            if info.base_offset >= end:
                return
            yield from self._segment_batches(
                info, max(start_offset, info.base_offset), end, columns
            )

    def read(
        self,
        start_offset: int,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        end_offset: int | None = None,
        at_least_one: bool = True,
    ) -> list[pa.RecordBatch]:
        """Records from ``start_offset`` up to about ``max_bytes`` (Arrow bytes).

        As Kafka's fetch, at least one record is returned when any is visible, even if it
        alone exceeds ``max_bytes`` - unless ``at_least_one`` is false (a fetch's later
        partitions). Offset equal to the high watermark gives []; outside
        ``[log start, high watermark]`` raises OffsetOutOfRangeError.
        """
        out: list[pa.RecordBatch] = []
        total = 0
        for batch in self.batches(start_offset, end_offset):
            size = batch.nbytes
            if total + size > max_bytes:
                rows = int((max_bytes - total) * batch.num_rows / max(size, 1))
                if not out and at_least_one:
                    rows = max(rows, 1)
                if rows > 0:
                    out.append(batch.slice(0, rows))
                break
            out.append(batch)
            total += size
        return out

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The earliest visible offset whose timestamp is >= ``timestamp_ms`` (Kafka's
        ListOffsets semantics), or None if there is none."""
        for info in self.manifest.segments:
            if info.next_offset is not None and info.next_offset <= self.log_start_offset:
                continue
            if info.base_offset >= self.high_watermark:
                return None
            if info.next_offset is not None and info.max_timestamp < timestamp_ms:
                continue
            start = max(info.base_offset, self.log_start_offset)
            tidx = self._time_index(info)
            hint = tidx.lookup(timestamp_ms) if tidx is not None else None
            if hint is not None:
                start = max(start, hint)
            end = min(
                self.high_watermark,
                info.next_offset if info.next_offset is not None else self.high_watermark,
            )
            if start >= end:
                continue  # nothing of this segment is visible (an object store's tail)
            for batch in self._segment_batches(info, start, end):
                ts = batch.column("timestamp").cast(pa.int64())
                mask = pc.greater_equal(ts, timestamp_ms)
                i = pc.index(mask, True).as_py()
                if i is not None and i >= 0:
                    return int(batch.column("offset")[i].as_py())
        return None

    def _time_index(self, info: SegmentInfo) -> TimeIndex | None:
        if info.sealed:
            return self._sealed_segment(info.name).time_index
        if self._active is not None and self._active.base_offset == info.base_offset:
            return self._active.time_index
        # Only the writer's in-memory index is known to match its frames. On disk, the
        # .timeindex of an .arrow segment may be stale or corrupt, and a hint that is too
        # high would skip the answer, so out-of-process readers scan from the base.
        return None


class PartitionReader:
    """Reads a partition from storage alone, in any process (Spark executors, tools).

    ``view()`` returns a consistent ``LogView`` of the latest committed state (an empty
    log at offset 0 for a partition that no writer has opened yet); on an object store, of
    its sealed prefix (module docstring). ``manifest_version``: a version known to exist
    (the one a Spark task's driver planned on), where finding the latest starts
    (``VersionedFiles.remember``).
    """

    def __init__(
        self,
        fs: FileSystem,
        root: str,
        topic: str,
        partition: int,
        *,
        verify_checksums: bool = True,
        manifest_version: int | None = None,
    ) -> None:
        self.fs = fs
        self.verify_checksums = verify_checksums
        self.topic = topic
        self.partition = partition
        self.path = names.partition_dir(root, topic, partition)
        self._store = ManifestStore(fs, self.path)
        if manifest_version is not None:
            self._store.files.remember(manifest_version)
        self._sealed: dict[str, SealedSegment] = {}

    def view(self, *, committed: bool = False) -> LogView:
        """See the class docstring; ``committed``: a ``read_committed`` view."""
        if not reads_tail(self.fs):
            return self._sealed_view(committed=committed)
        for _ in range(20):
            # the manifest first, then the high watermark of its active segment's epoch:
            # a roll in between moves the watermark past that segment (read again); a new
            # leader in between leaves the old epoch's checkpoint as the manifest left it
            manifest = self._store.latest()
            try:
                hwm = checkpoints.read_high_watermark(
                    self.fs, self.path, manifest.active.name if manifest else ""
                )
            except CorruptMetadataError:
                hwm = None  # a writer died mid-write: show only what rolled segments hold
            if manifest is None:
                # no writer has opened this partition yet (the broker opens partitions on
                # first use): it reads as an empty log at offset 0, as it will start
                empty = SegmentInfo(names.segment_name(0, kind=names.ACTIVE_KIND), 0, None)
                manifest, hwm = Manifest(0, 0, (empty,)), LogPosition(0, 0, 0)
            if hwm is None:
                hwm = LogPosition(manifest.active.base_offset, 0, manifest.active.base_offset)
            if hwm.segment > manifest.active.base_offset:
                continue  # a newer manifest was committed between the two reads
            try:  # after the high watermark: see sparklog.storage.txnindex
                txn = read_txn_index(self.fs, self.path, manifest.active.name)
            except CorruptMetadataError:
                continue  # replaced atomically, so only a writer mid-write: read again
            return self._view(manifest, hwm, txn, committed)
        raise CorruptSegmentError(
            f"{self.topic}-{self.partition}: high watermark points past the latest manifest"
        )

    def _sealed_view(self, *, committed: bool) -> LogView:
        """The view of the sealed prefix (an object store: see the module docstring): the
        manifest, then the transaction index; no high-watermark checkpoint."""
        for _ in range(20):
            manifest = self._store.latest()
            if manifest is None:
                empty = SegmentInfo(names.segment_name(0, kind=names.ACTIVE_KIND), 0, None)
                manifest = Manifest(0, 0, (empty,))
            end = max(sealed_end(manifest), manifest.log_start_offset)
            after = next((s for s in manifest.segments if s.base_offset >= end), manifest.active)
            try:
                txn = read_txn_index(self.fs, self.path, manifest.active.name)
            except CorruptMetadataError:
                continue  # replaced atomically, so only a writer mid-write: read again
            return self._view(manifest, LogPosition(after.base_offset, 0, end), txn, committed)
        raise CorruptMetadataError(
            f"{self.topic}-{self.partition}: the transaction index kept being unreadable"
        )

    def _view(
        self, manifest: Manifest, hwm: LogPosition, txn: TxnIndex, committed: bool
    ) -> LogView:
        live = manifest.names()
        self._sealed = {k: v for k, v in self._sealed.items() if k in live}
        return LogView(
            self.fs,
            self.path,
            manifest,
            hwm,
            sealed_cache=self._sealed,
            label=f"{self.topic}-{self.partition}",
            verify_checksums=self.verify_checksums,
            txn=txn,
            committed=committed,
        )
