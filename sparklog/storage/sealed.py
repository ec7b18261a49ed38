"""Sealed segments: plain Parquet files that Spark, DuckDB, Polars or pyarrow can open.

Format: one Parquet file per segment (``names.segment_name``), schema ``RECORD_SCHEMA``,
zstd compression, rows in offset order (declared as the sorting column), row groups of at
most ``ROW_GROUP_ROWS`` rows with min/max statistics on every column (so on ``offset`` and
``timestamp``), and page CRCs, verified on read unless a reader opts out
(``verify_checksums=False``: 15-25 % faster, for readers that check data elsewhere).
The Arrow schema is stored in the file, so pyarrow reads back exactly ``RECORD_SCHEMA``.
On an object store a segment sealed by its writer also carries, in the footer's key-value
metadata under ``PRODUCER_STATE_KEY``, the producer snapshot as the segment ends (the JSON
of ``sparklog.storage.producers``): the state a new leader starts its replay from, with no
object of its own (``sparklog.storage.rolls``).

Indexes (see ``sparklog.storage.index``): offset index ``(first offset of row group,
row-group number)``, one entry per row group; time index ``(max timestamp of the rows before
row group i, first offset of row group i)``. They duplicate the footer's statistics in a
few bytes that need no Parquet decoding. An index that disagrees with the footer is
rebuilt from it (``SealedSegment.open``). On an object store (``separate_indexes`` false)
the index files are neither written nor read: a reader has to fetch the footer anyway, and
two more objects per segment would cost two PUTs to write and two GETs to open; the
indexes are built from the footer there.

Writing (``write_sealed``): the file and its indexes are written under names that no
manifest names yet, fsynced, and the directory fsynced (on an object store: one PUT of the
file, a multipart upload past 10 MiB). Making the segment live is the
caller's manifest commit; until then the file is an orphan that garbage collection removes.
``seal_rolled`` writes the sealed form of a rolled active segment and returns the manifest
entry that replaces it (the log commits it as ``transforms.Seal``).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparklog.errors import CorruptSegmentError
from sparklog.storage import names
from sparklog.storage.active import decode_frame, scan
from sparklog.storage.fs import FileSystem
from sparklog.storage.index import OffsetIndex, TimeIndex
from sparklog.storage.manifest import SegmentInfo
from sparklog.storage.records import RECORD_SCHEMA, with_attributes
from sparklog.storage.versioned import on_object_store

ROW_GROUP_ROWS = 128 * 1024
#: the footer key of the producer snapshot a sealed segment carries (module docstring)
PRODUCER_STATE_KEY = "sparklog.producer_state"
_NO_TIMESTAMP = -(2**63)


def separate_indexes(fs: FileSystem) -> bool:
    """Whether sealed segments on ``fs`` have ``.index``/``.timeindex`` files beside them:
    not on an object store (``versioned.on_object_store``; module docstring)."""
    return not on_object_store(fs)


@dataclass(frozen=True)
class SealedStats:
    """What a manifest records about a sealed file it has just written."""

    name: str
    records: int
    size_bytes: int
    min_timestamp: int
    max_timestamp: int
    first_offset: int
    last_offset: int


def _ts_ms(stats: pq.Statistics) -> int:
    """The max of a timestamp[ms] column chunk as int64 milliseconds.

    ``stats.max_raw`` is the stored INT64 (milliseconds: RECORD_SCHEMA's unit); going
    through ``stats.max`` would build a Python datetime, which fails past year 9999.
    """
    return int(stats.max_raw)


def indexes_from_metadata(md: pq.FileMetaData) -> tuple[OffsetIndex, TimeIndex]:
    """Offset and time indexes derived from a Parquet footer's row-group statistics."""
    schema = md.schema.to_arrow_schema()
    off_col = schema.get_field_index("offset")
    ts_col = schema.get_field_index("timestamp")
    oidx, tidx = OffsetIndex(), TimeIndex()
    max_ts = _NO_TIMESTAMP
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        if rg.num_rows == 0:
            continue
        stats = rg.column(off_col).statistics
        if stats is None or not stats.has_min_max:
            raise CorruptSegmentError(f"row group {i} has no offset statistics")
        first = int(stats.min)
        oidx.append(first, i)
        if max_ts != _NO_TIMESTAMP:
            tidx.append(max_ts, first)
        ts_stats = rg.column(ts_col).statistics
        if ts_stats is not None and ts_stats.has_min_max:
            max_ts = max(max_ts, _ts_ms(ts_stats))
    return oidx, tidx


def write_sealed(
    fs: FileSystem,
    directory: str,
    name: str,
    batches: Iterable[pa.RecordBatch],
    *,
    row_group_rows: int = ROW_GROUP_ROWS,
    footer: dict[str, bytes] | None = None,
) -> SealedStats:
    """Write ``batches`` (offset order, RECORD_SCHEMA) as the sealed segment ``name``;
    ``footer``: key-value metadata added to the Parquet footer."""
    writer = SealedWriter(fs, directory, name, row_group_rows=row_group_rows, footer=footer)
    try:
        for batch in batches:
            writer.write(batch)
    except BaseException:
        writer.abandon()
        raise
    return writer.close()


def seal_rolled(
    fs: FileSystem,
    directory: str,
    info: SegmentInfo,
    *,
    row_group_rows: int = ROW_GROUP_ROWS,
    epoch: int | None = None,
    footer: dict[str, bytes] | None = None,
) -> SegmentInfo:
    """Write the sealed segment of the rolled ``.arrow`` segment ``info`` (every frame CRC
    checked, and its end checked against the manifest's); the manifest entry replacing it.
    Only the manifest's ``size_bytes`` of the file are read: a segment frozen by a new
    leader may hold a deposed leader's bytes past them. ``epoch``: the sealing leader's, in
    cluster mode (it names the file, so two leaders never write the same one). ``footer``:
    key-value metadata for the footer (``PRODUCER_STATE_KEY``)."""
    src = fs.join(directory, info.name)
    buf = fs.read_buffer(src)
    if info.size_bytes and buf.size > info.size_bytes:
        buf = buf.slice(0, info.size_bytes)
    frames = scan(buf, info.base_offset)
    end = frames[-1].next_offset if frames else info.base_offset
    if end != info.next_offset:
        raise CorruptSegmentError(
            f"{src}: rolled segment holds offsets up to {end - 1}, manifest says "
            f"{info.next_offset - 1 if info.next_offset else '?'}"
        )
    name = names.segment_name(info.base_offset, kind=names.SEALED_KIND, epoch=epoch)
    batches = (decode_frame(buf, h) for h in frames)
    stats = write_sealed(fs, directory, name, batches, row_group_rows=row_group_rows, footer=footer)
    return dataclasses.replace(
        info,
        name=name,
        records=stats.records,
        size_bytes=stats.size_bytes,
        min_timestamp=stats.min_timestamp,
        max_timestamp=stats.max_timestamp,
    )


class SealedWriter:
    """Writes one sealed segment batch by batch: ``write`` each batch (offset order,
    RECORD_SCHEMA), then ``close`` (file and indexes fsynced, directory fsynced) for its
    stats. ``write_sealed`` is the same for an iterable of batches."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        name: str,
        *,
        row_group_rows: int = ROW_GROUP_ROWS,
        footer: dict[str, bytes] | None = None,
    ) -> None:
        self.fs = fs
        self.footer = footer
        self.directory = directory
        self.name = name
        self.path = fs.join(directory, name)
        self.row_group_rows = row_group_rows
        self.records = 0
        self._min_ts: int | None = None
        self._max_ts: int | None = None
        self._first = self._last = -1
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._out = fs.open_output(self.path)
        self._writer = pq.ParquetWriter(
            self._out,
            RECORD_SCHEMA,
            compression="zstd",
            write_statistics=True,
            write_page_checksum=True,
            use_dictionary=False,
            sorting_columns=[pq.SortingColumn(0)],
        )

    def _flush(self) -> None:
        if self._pending_rows:
            self._writer.write_table(
                pa.Table.from_batches(self._pending, RECORD_SCHEMA),
                row_group_size=self.row_group_rows,
            )
        self._pending, self._pending_rows = [], 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._first < 0:
            self._first = int(batch.column(0)[0].as_py())
        self._last = int(batch.column(0)[-1].as_py())
        self.records += batch.num_rows
        mm = pc.min_max(batch.column("timestamp").cast(pa.int64()))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        self._min_ts = lo if self._min_ts is None else min(self._min_ts, lo)
        self._max_ts = hi if self._max_ts is None else max(self._max_ts, hi)
        while batch.num_rows:
            take = min(batch.num_rows, self.row_group_rows - self._pending_rows)
            self._pending.append(batch.slice(0, take))
            self._pending_rows += take
            batch = batch.slice(take)
            if self._pending_rows >= self.row_group_rows:
                self._flush()

    def close(self) -> SealedStats:
        self._flush()
        if self.footer:
            self._writer.add_key_value_metadata(self.footer)
        self._writer.close()
        size = self._out.tell()  # what was written: no request to ask an object store
        self._out.close()
        self.fs.sync_file(self.path)
        if separate_indexes(self.fs):
            seg = SealedSegment(self.fs, self.directory, self.name)
            try:
                seg.write_indexes()
            finally:
                seg.close()
        self.fs.sync_dir(self.directory)
        return SealedStats(
            self.name,
            self.records,
            size,
            _NO_TIMESTAMP if self._min_ts is None else int(self._min_ts),
            _NO_TIMESTAMP if self._max_ts is None else int(self._max_ts),
            self._first,
            self._last,
        )

    def abandon(self) -> None:
        """Stop writing after a failure; the partial file is an orphan (never named by a
        manifest), left for garbage collection."""
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(Exception):
            self._out.close()


class SealedSegment:
    """Read access to one sealed Parquet segment (format in the module docstring)."""

    def __init__(
        self, fs: FileSystem, directory: str, name: str, *, verify_checksums: bool = True
    ) -> None:
        self.fs = fs
        self.name = name
        self.path = fs.join(directory, name)
        self._oidx_path = fs.join(directory, names.offset_index_name(name))
        self._tidx_path = fs.join(directory, names.time_index_name(name))
        try:
            self._file = pq.ParquetFile(
                fs.open_input(self.path), page_checksum_verification=verify_checksums
            )
        except (pa.ArrowException, OSError) as e:
            if isinstance(e, FileNotFoundError):
                raise
            raise CorruptSegmentError(f"{self.path}: not a readable Parquet file: {e}") from e
        self.metadata = self._file.metadata
        self._oidx: OffsetIndex | None = None
        self._tidx: TimeIndex | None = None

    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        if self._oidx is None or self._tidx is None:
            expected_o, expected_t = indexes_from_metadata(self.metadata)
            if not separate_indexes(self.fs):
                self._oidx, self._tidx = expected_o, expected_t
                return expected_o, expected_t
            oidx = OffsetIndex.load(self.fs, self._oidx_path)
            tidx = TimeIndex.load(self.fs, self._tidx_path)
            if oidx != expected_o or tidx != expected_t:
                oidx, tidx = expected_o, expected_t
            self._oidx, self._tidx = oidx, tidx
        return self._oidx, self._tidx

    def indexes_on_disk_valid(self) -> bool:
        """Whether the index files match the footer (true where there are none)."""
        if not separate_indexes(self.fs):
            return True
        expected = indexes_from_metadata(self.metadata)
        return (
            OffsetIndex.load(self.fs, self._oidx_path) == expected[0]
            and TimeIndex.load(self.fs, self._tidx_path) == expected[1]
        )

    def write_indexes(self) -> None:
        """(Re)write both index files from the footer, synced (none on an object store)."""
        oidx, tidx = indexes_from_metadata(self.metadata)
        if not separate_indexes(self.fs):
            self._oidx, self._tidx = oidx, tidx
            return
        for path, idx in ((self._oidx_path, oidx), (self._tidx_path, tidx)):
            self.fs.delete(path)
            self.fs.write_new(path, idx.to_bytes())
        self._oidx, self._tidx = oidx, tidx

    @property
    def offset_index(self) -> OffsetIndex:
        return self._indexes()[0]

    @property
    def time_index(self) -> TimeIndex:
        return self._indexes()[1]

    def read(
        self, start_offset: int, end_offset: int | None = None, *, columns: list[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Batches of rows with ``start_offset <= offset < end_offset``, one per row group."""
        oidx = self.offset_index
        first_entry = max(bisect.bisect_right(oidx.keys, start_offset) - 1, 0)
        for j in range(first_entry, len(oidx)):
            first, rg = oidx.keys[j], oidx.values[j]
            if end_offset is not None and first >= end_offset:
                return
            legacy = "attributes" not in self.metadata.schema.names
            wanted = columns
            if legacy and columns is not None and "attributes" in columns:
                wanted = [c for c in columns if c != "attributes"]
            try:
                table = self._file.read_row_group(rg, columns=wanted)
            except (pa.ArrowException, OSError) as e:
                raise CorruptSegmentError(f"{self.path}: row group {rg} unreadable: {e}") from e
            for batch in table.to_batches():
                if legacy and (columns is None or "attributes" in columns):
                    batch = with_attributes(batch)
                    if columns is not None:
                        batch = batch.select(columns)
                yield from _clip(batch, start_offset, end_offset)

    def close(self) -> None:
        self._file.close()


def _clip(
    batch: pa.RecordBatch, start_offset: int, end_offset: int | None
) -> Iterator[pa.RecordBatch]:
    """``batch`` restricted to ``start_offset <= offset < end_offset`` (offsets sorted)."""
    offsets = batch.column("offset")
    n = batch.num_rows
    if n == 0:
        return
    lo = 0
    if offsets[0].as_py() < start_offset:
        lo = int(pc.sum(pc.less(offsets, start_offset)).as_py())
    hi = n
    if end_offset is not None and offsets[n - 1].as_py() >= end_offset:
        hi = int(pc.sum(pc.less(offsets, end_offset)).as_py())
    if hi > lo:
        yield batch.slice(lo, hi - lo) if (lo, hi) != (0, n) else batch


_sealer: ThreadPoolExecutor | None = None
_sealer_lock = threading.Lock()


def background_sealer() -> ThreadPoolExecutor:
    """One sealing thread per process, shared by every log: sealing is Parquet encoding
    (zstd), which releases the GIL and runs beside appends; one at a time bounds its CPU."""
    global _sealer
    with _sealer_lock:
        if _sealer is None:
            _sealer = ThreadPoolExecutor(1, thread_name_prefix="sparklog-seal")
        return _sealer
