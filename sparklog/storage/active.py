"""The active segment: an append-only file of CRC-framed Arrow IPC record batches.

File format (little-endian)::

    file header, 16 bytes:  magic b"SPLGACT1" | format u32 (=2) | reserved u32 (=0)
    frame, repeated:        frame header (32 bytes) | payload | zero padding to 8 bytes
    frame header:           magic b"SLFR" | crc32c u32 | payload_len u32 | record_count u32
                            | base_offset i64 | max_timestamp i64
    payload:                one Arrow IPC encapsulated RecordBatch message of RECORD_SCHEMA
                            (``RecordBatch.serialize()``), read zero-copy from a memory map

Format 1 is format 2 without the ``attributes`` column (``records.SCHEMA_V1``): its frames
read as records with attributes 0, and a log that opens a format-1 segment with frames in
it rolls before its next append, so that no file mixes the two.

``crc32c`` is CRC-32C (Castagnoli) of every byte after itself: the rest of the frame header,
the payload and its padding. Frames hold dense offsets ``base_offset ..
base_offset + record_count - 1``; the first frame starts at the segment's base offset and
each next frame where the previous ended. Every frame, and so every record, starts on an
8-byte boundary, which keeps Arrow buffers aligned.

Recovery (``ActiveSegment.open``): frames are walked from the file header and each is
checked (magic, length within the file, CRC, offset continuity); the file is truncated at
the first bad frame, so a torn or corrupt tail leaves the longest valid prefix. The offset
and time indexes of the active segment are then rebuilt from the frames. Readers in other
processes (``read_frames``) verify every CRC they decode and never read past the end they
are given (the high watermark). ``ActiveSegment`` is not thread-safe: ``PartitionLog``
serialises appends; ``end`` (size and next offset, replaced as one value after each frame)
may be read from any thread, and everything below it is written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c
import pyarrow as pa

from sparklog.errors import CorruptSegmentError
from sparklog.storage import names
from sparklog.storage.fs import AppendFile, FileSystem
from sparklog.storage.index import OffsetIndex, TimeIndex
from sparklog.storage.records import RECORD_SCHEMA, SCHEMA_V1, max_timestamp, with_attributes

FILE_MAGIC = b"SPLGACT1"
FILE_FORMAT = 2
FILE_HEADER = FILE_MAGIC + struct.pack("<II", FILE_FORMAT, 0)
FILE_HEADER_SIZE = len(FILE_HEADER)
FRAME_MAGIC = b"SLFR"
_FRAME = struct.Struct("<4sIIIqq")
FRAME_HEADER_SIZE = _FRAME.size
_NO_TIMESTAMP = -(2**63)
_PAD = bytes(8)


def _padded(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True)
class FrameHeader:
    """A decoded frame header and where its frame lies in the file."""

    position: int
    payload_len: int
    record_count: int
    base_offset: int
    max_timestamp: int
    crc: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def end(self) -> int:
        return self.position + FRAME_HEADER_SIZE + _padded(self.payload_len)


def _header_at(buf: pa.Buffer | memoryview, pos: int, limit: int) -> FrameHeader | None:
    """The frame header at ``pos`` if it is well formed and its frame ends by ``limit``."""
    if pos < FILE_HEADER_SIZE or pos + FRAME_HEADER_SIZE > limit:
        return None
    magic, crc, plen, count, base, maxts = _FRAME.unpack_from(buf, pos)
    if magic != FRAME_MAGIC or count <= 0 or base < 0:
        return None
    h = FrameHeader(pos, plen, count, base, maxts, crc)
    return h if h.end <= limit else None


def _crc_ok(view: memoryview, h: FrameHeader) -> bool:
    return bool(int(crc32c.crc32c(view[h.position + 8 : h.end])) == h.crc)


def file_format(buf: pa.Buffer | memoryview) -> int:
    """The format number of an active segment's file header."""
    return int(struct.unpack_from("<I", buf, 8)[0])


def decode_frame(buf: pa.Buffer, h: FrameHeader) -> pa.RecordBatch:
    start = h.position + FRAME_HEADER_SIZE
    legacy = file_format(buf) == 1
    try:
        batch = pa.ipc.read_record_batch(
            buf.slice(start, h.payload_len), SCHEMA_V1 if legacy else RECORD_SCHEMA
        )
        if legacy:
            batch = with_attributes(batch)
    except pa.ArrowException as e:
        raise CorruptSegmentError(f"frame at byte {h.position} does not decode: {e}") from e
    if batch.num_rows != h.record_count:
        raise CorruptSegmentError(
            f"frame at byte {h.position} holds {batch.num_rows} rows, header says {h.record_count}"
        )
    return batch


def scan(buf: pa.Buffer, base_offset: int, *, verify: bool = True) -> list[FrameHeader]:
    """The longest valid prefix of frames of an active segment held in ``buf``."""
    view = memoryview(buf)
    if len(view) < FILE_HEADER_SIZE or bytes(view[:8]) != FILE_MAGIC:
        return []
    frames: list[FrameHeader] = []
    pos, expected = FILE_HEADER_SIZE, base_offset
    limit = len(view)
    while True:
        h = _header_at(view, pos, limit)
        if h is None or h.base_offset != expected or (verify and not _crc_ok(view, h)):
            return frames
        frames.append(h)
        pos, expected = h.end, h.next_offset


def valid_file_header(buf: pa.Buffer) -> bool:
    return bool(buf.size >= FILE_HEADER_SIZE and buf.slice(0, 8).to_pybytes() == FILE_MAGIC)


def read_frames(
    buf: pa.Buffer,
    *,
    base_offset: int,
    start_offset: int,
    end_position: int,
    index: OffsetIndex | None = None,
    path: str = "",
) -> Iterator[pa.RecordBatch]:
    """Batches holding offsets >= ``start_offset``, from frames ending by ``end_position``.

    The first batch is sliced to start at ``start_offset``. ``index`` (possibly stale or
    corrupt) only says where to start: a position it gives is used only if a frame with
    the expected base offset is found there, otherwise the walk starts from the file header.
    Raises CorruptSegmentError if a frame below ``end_position`` fails its CRC.
    """
    view = memoryview(buf)
    limit = min(end_position, len(view))
    pos, expected = FILE_HEADER_SIZE, base_offset
    if index is not None:
        entry = index.lookup(start_offset)
        if entry is not None:
            h = _header_at(view, entry[1], limit)
            if h is not None and h.base_offset == entry[0]:
                pos, expected = entry[1], entry[0]
    while pos < limit:
        h = _header_at(view, pos, limit)
        if h is None or h.base_offset != expected:
            raise CorruptSegmentError(
                f"{path}: no valid frame at byte {pos} (expected offset {expected}) below "
                f"the visible end {limit}"
            )
        pos, expected = h.end, h.next_offset
        if h.next_offset <= start_offset:
            continue
        if not _crc_ok(view, h):
            raise CorruptSegmentError(
                f"{path}: frame at byte {h.position} (offsets {h.base_offset}.."
                f"{h.next_offset - 1}) fails its CRC"
            )
        batch = decode_frame(buf, h)
        if h.base_offset < start_offset:
            batch = batch.slice(start_offset - h.base_offset)
        yield batch


def build_indexes(frames: list[FrameHeader], interval_bytes: int) -> tuple[OffsetIndex, TimeIndex]:
    """Indexes of an active segment from its frame headers (see ``sparklog.storage.index``)."""
    oidx, tidx = OffsetIndex(), TimeIndex()
    since, max_ts = interval_bytes, _NO_TIMESTAMP
    for h in frames:
        if since >= interval_bytes:
            oidx.append(h.base_offset, h.position)
            if max_ts != _NO_TIMESTAMP:
                tidx.append(max_ts, h.base_offset)
            since = 0
        since += h.end - h.position
        max_ts = max(max_ts, h.max_timestamp)
    return oidx, tidx


class ActiveSegment:
    """The appendable segment of a partition; see the module docstring for the format."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        base_offset: int,
        frames: list[FrameHeader],
        index_interval_bytes: int,
        *,
        name: str = "",
    ) -> None:
        self.fs = fs
        self.base_offset = base_offset
        self.name = name or names.segment_name(base_offset, kind=names.ACTIVE_KIND)
        self.path = fs.join(directory, self.name)
        self._oidx_path = fs.join(directory, names.offset_index_name(self.name))
        self._tidx_path = fs.join(directory, names.time_index_name(self.name))
        self.interval = index_interval_bytes
        self.offset_index, self.time_index = build_indexes(frames, index_interval_bytes)
        self.next_offset = frames[-1].next_offset if frames else base_offset
        self.size = frames[-1].end if frames else FILE_HEADER_SIZE
        self.max_timestamp = max((h.max_timestamp for h in frames), default=_NO_TIMESTAMP)
        self.frame_count = len(frames)
        self.end = (self.size, self.next_offset)
        last_indexed = self.offset_index.values[-1] if len(self.offset_index) else None
        self._since_index = (
            self.size - last_indexed if last_indexed is not None else index_interval_bytes
        )
        self._file: AppendFile = fs.open_append(self.path)
        self._oidx_file: AppendFile = fs.open_append(self._oidx_path)
        self._tidx_file: AppendFile = fs.open_append(self._tidx_path)
        self._map: pa.Buffer | None = None
        #: a format-1 file with frames: the log rolls it before appending (module docstring)
        self.legacy = False

    @classmethod
    def create(
        cls,
        fs: FileSystem,
        directory: str,
        base_offset: int,
        index_interval_bytes: int,
        *,
        epoch: int | None = None,
    ) -> ActiveSegment:
        """A new empty segment file (header written and synced, directory synced); named
        with ``epoch`` for a cluster-mode leader (``names.segment_name``)."""
        name = names.segment_name(base_offset, kind=names.ACTIVE_KIND, epoch=epoch)
        path = fs.join(directory, name)
        for p in (
            path,
            fs.join(directory, names.offset_index_name(name)),
            fs.join(directory, names.time_index_name(name)),
        ):
            fs.delete(p)
        f = fs.open_append(path)
        try:
            f.write(FILE_HEADER)
            f.sync()
        finally:
            f.close()
        fs.sync_dir(directory)
        return cls(fs, directory, base_offset, [], index_interval_bytes, name=name)

    @classmethod
    def open(
        cls, fs: FileSystem, directory: str, name: str, index_interval_bytes: int
    ) -> tuple[ActiveSegment, int]:
        """Open the active segment file ``name`` for appending after recovery; returns the
        segment and the bytes truncated."""
        parsed = names.parse_segment_name(name)
        if parsed is None or parsed.kind != names.ACTIVE_KIND:
            raise ValueError(f"{name!r} is not an active segment name")
        base_offset, epoch = parsed.base_offset, parsed.epoch
        path = fs.join(directory, name)
        if not fs.exists(path):
            return cls.create(fs, directory, base_offset, index_interval_bytes, epoch=epoch), 0
        buf = fs.read_buffer(path)
        size = buf.size
        if not valid_file_header(buf):
            del buf
            seg = cls.create(fs, directory, base_offset, index_interval_bytes, epoch=epoch)
            return seg, size
        frames = scan(buf, base_offset)
        legacy = file_format(buf) == 1
        del buf
        if legacy and not frames:
            return cls.create(fs, directory, base_offset, index_interval_bytes, epoch=epoch), size
        valid_end = frames[-1].end if frames else FILE_HEADER_SIZE
        if valid_end < size:
            f = fs.open_append(path)
            try:
                f.truncate(valid_end)
            finally:
                f.close()
        seg = cls(fs, directory, base_offset, frames, index_interval_bytes, name=name)
        seg.legacy = legacy
        seg._rewrite_indexes()
        return seg, size - valid_end

    def _rewrite_indexes(self) -> None:
        for f, idx in ((self._oidx_file, self.offset_index), (self._tidx_file, self.time_index)):
            f.truncate(0)
            f.write(idx.to_bytes())

    def append(self, batch: pa.RecordBatch) -> FrameHeader:
        """Write one frame holding ``batch`` (full RECORD_SCHEMA, offsets from next_offset).

        Not durable until ``sync``.
        """
        payload = batch.serialize()
        plen = payload.size
        pad = _PAD[: _padded(plen) - plen]
        maxts = max_timestamp(batch)
        rest = _FRAME.pack(FRAME_MAGIC, 0, plen, batch.num_rows, self.next_offset, maxts)[8:]
        crc = crc32c.crc32c(rest)
        crc = crc32c.crc32c(payload, value=crc)
        if pad:
            crc = crc32c.crc32c(pad, value=crc)
        header = FRAME_MAGIC + struct.pack("<I", crc) + rest
        h = FrameHeader(self.size, plen, batch.num_rows, self.next_offset, maxts, crc)
        self._file.write_parts([header, payload, pad] if pad else [header, payload])
        if self._since_index >= self.interval:
            self._oidx_file.write(self.offset_index.append(h.base_offset, h.position))
            if self.max_timestamp != _NO_TIMESTAMP:
                self._tidx_file.write(self.time_index.append(self.max_timestamp, h.base_offset))
            self._since_index = 0
        self._since_index += h.end - h.position
        self.size = h.end
        self.next_offset = h.next_offset
        self.max_timestamp = max(self.max_timestamp, maxts)
        self.frame_count += 1
        self.end = (self.size, self.next_offset)
        return h

    def sync(self) -> None:
        self._file.sync()

    def buffer(self) -> pa.Buffer:
        """A memory map covering at least everything appended so far."""
        if self._map is None or self._map.size < self.size:
            self._map = self.fs.read_buffer(self.path)
        return self._map

    def read(self, start_offset: int, end_position: int) -> Iterator[pa.RecordBatch]:
        return read_frames(
            self.buffer(),
            base_offset=self.base_offset,
            start_offset=start_offset,
            end_position=end_position,
            index=self.offset_index,
            path=self.path,
        )

    def close(self) -> None:
        self._map = None
        for f in (self._file, self._oidx_file, self._tidx_file):
            f.close()
