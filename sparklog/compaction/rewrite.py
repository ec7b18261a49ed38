"""The per-segment work of compaction, as it runs inside Spark tasks: pyarrow only, no Spark.

Three steps, each vectorised with Arrow compute (no per-record Python):

1. ``last_offsets(task)``: one input segment's last offset per key (records without a key
   are skipped: compaction drops them; so are transaction markers and the records of
   aborted transactions). Reads only the key, offset, producer id and attributes columns.
2. ``kept_chunks(task, winners)``: one input segment filtered to the records whose offset
   is in ``winners`` (the last offset of their key over the whole section, found by Spark
   from step 1; every transaction marker is one), minus tombstones below the task's
   ``tombstones_below``; the kept records
   leave as Arrow IPC stream chunks, so Spark moves them without converting a row.
   A segment none of whose offsets won is never read.
3. ``GroupWriter``: the chunks of one output group, in offset order, written as a new
   sealed segment (``SealedWriter``: Parquet, indexes, fsync). The output's name carries
   the Spark task's attempt number on top of the planned generation, so two attempts of one
   task (a retry, speculation) never write the same file.

Only plain data crosses the Spark boundary: ``SegmentTask`` and ``GroupTask`` are frozen
dataclasses of primitives, and results are plain rows (``GroupResult.to_table``).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import CompactionOutputError
from sparklog.storage import crashpoints, names
from sparklog.storage.control import CONTROL
from sparklog.storage.fs import FileSystem
from sparklog.storage.manifest import NO_TIMESTAMP
from sparklog.storage.producers import AbortedTxn
from sparklog.storage.records import RECORD_SCHEMA
from sparklog.storage.sealed import ROW_GROUP_ROWS, SealedSegment, SealedStats, SealedWriter
from sparklog.storage.store import filesystem_for
from sparklog.storage.txnindex import TxnIndex, visible

crashpoints.register("compaction.after_segment_write")

#: Rows deduplicated at a time in step 1 (bounds its memory to this many keys and offsets
#: plus the distinct keys seen so far).
DEDUPE_ROWS = 1 << 20
#: About this many bytes of kept records per chunk handed back to Spark in step 2.
CHUNK_BYTES = 8 << 20

LAST_OFFSETS_SCHEMA = pa.schema(
    [("part", pa.int32()), ("seg", pa.int32()), ("key", pa.binary()), ("offset", pa.int64())]
)
CHUNK_SCHEMA = pa.schema(
    [
        ("grp", pa.int32()),
        ("first_offset", pa.int64()),
        ("rows", pa.int64()),
        ("tombstones_removed", pa.int64()),
        ("data", pa.binary()),
    ]
)


@dataclass(frozen=True)
class SegmentTask:
    """One input segment of a compaction job (``seg`` numbers them within the job)."""

    seg: int
    part: int
    root: str
    topic: str
    partition: int
    name: str
    base_offset: int
    next_offset: int
    tombstones_below: int
    group: int = -1
    #: aborted transactions with records in the segment: (producer id, first, last offset)
    aborted: tuple[tuple[int, int, int], ...] = ()

    def visible(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` without control records and aborted transactions' records."""
        txn = TxnIndex(None, tuple(AbortedTxn(*a) for a in self.aborted))
        return visible(batch, txn, committed=True)


@dataclass(frozen=True)
class GroupTask:
    """One output segment: ``name`` (planned generation) covering [base, next)."""

    group: int
    root: str
    topic: str
    partition: int
    name: str
    base_offset: int
    next_offset: int
    row_group_rows: int = ROW_GROUP_ROWS


#: ``GroupResult`` as the row a Spark task returns (DDL; ``to_table`` yields this order)
RESULT_TYPE = (
    "grp int, name string, records long, size_bytes long, min_timestamp long, "
    "max_timestamp long, first_offset long, last_offset long, first_tombstone long, "
    "tombstones_removed long"
)
_RESULT_COLUMNS = [c.split()[0] for c in RESULT_TYPE.split(", ")]


@dataclass(frozen=True)
class GroupResult(SealedStats):
    """A written output segment: its ``SealedStats``, the output group it is, the offset
    of the first tombstone it kept (-1: none) and how many tombstones it dropped."""

    group: int = -1
    first_tombstone: int = -1
    tombstones_removed: int = 0

    def to_table(self) -> pa.Table:
        values = {**dataclasses.asdict(self), "grp": self.group}
        return pa.table({c: [values[c]] for c in _RESULT_COLUMNS})

    @classmethod
    def from_row(cls, row: Any) -> GroupResult:
        values = {c: row[c] for c in _RESULT_COLUMNS}
        values["group"] = values.pop("grp")
        return cls(**values)


def _partition_path(root: str, topic: str, partition: int) -> tuple[FileSystem, str]:
    fs, root_path = filesystem_for(root)
    return fs, names.partition_dir(root_path, topic, partition)


def _open_segment(task: SegmentTask) -> SealedSegment:
    fs, path = _partition_path(task.root, task.topic, task.partition)
    return SealedSegment(fs, path, task.name)


# ---------------------------------------------------------------------- step 1


def _dedupe(tables: list[pa.Table]) -> pa.Table:
    """(key, offset) rows reduced to the largest offset per non-null key."""
    t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    t = t.filter(pc.is_valid(t.column("key")))
    out = t.group_by("key").aggregate([("offset", "max")])
    return pa.table({"key": out.column("key"), "offset": out.column("offset_max")})


_KEY_OFFSET = pa.schema([("key", pa.binary()), pa.field("offset", pa.int64(), nullable=False)])


def _markers(batch: pa.RecordBatch) -> pa.Table | None:
    """(key, offset) rows for the transaction markers of ``batch``, each under a key no
    record has (a NUL byte and its offset), so that every marker is kept."""
    attrs = batch.column("attributes")
    if not pc.max(attrs).as_py():
        return None
    control = pc.not_equal(pc.bit_wise_and(attrs, pa.scalar(CONTROL, pa.int8())), 0)
    offsets = batch.column("offset").filter(control)
    if not len(offsets):
        return None
    keys = pa.array([b"\x00marker" + o.to_bytes(8, "big") for o in offsets.to_pylist()])
    return pa.Table.from_arrays([keys, offsets], schema=_KEY_OFFSET)


def last_offsets(task: SegmentTask, *, dedupe_rows: int = DEDUPE_ROWS) -> Iterator[pa.RecordBatch]:
    """Step 1 for one segment: rows (part, seg, key, last offset of key in the segment)."""
    seg = _open_segment(task)
    try:
        partials: list[pa.Table] = []
        pending: list[pa.Table] = []
        rows = 0
        columns = ["offset", "key", "producer_id", "attributes"]
        for raw in seg.read(task.base_offset, task.next_offset, columns=columns):
            batch = task.visible(raw)  # markers and aborted records never win a key...
            pending.append(pa.Table.from_batches([batch]).select(["key", "offset"]))
            markers = _markers(raw)
            if markers is not None:  # ...and every marker wins under a key of its own
                pending.append(markers)
            rows += batch.num_rows
            if rows >= dedupe_rows:
                partials.append(_dedupe(pending))
                pending, rows = [], 0
                if len(partials) > 1:
                    partials = [_dedupe(partials)]
        if pending:
            partials.append(_dedupe(pending))
    finally:
        seg.close()
    if not partials:
        return
    table = _dedupe(partials) if len(partials) > 1 else partials[0]
    n = table.num_rows
    out = pa.table(
        [
            pa.repeat(pa.scalar(task.part, pa.int32()), n),
            pa.repeat(pa.scalar(task.seg, pa.int32()), n),
            table.column("key"),
            table.column("offset"),
        ],
        schema=LAST_OFFSETS_SCHEMA,
    )
    yield from out.to_batches()


# ---------------------------------------------------------------------- step 2


def _ipc(batches: list[pa.RecordBatch]) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, RECORD_SCHEMA) as writer:
        for b in batches:
            writer.write_batch(b)
    return sink.getvalue()


def kept_chunks(task: SegmentTask, winners: pa.Array) -> Iterator[tuple[int, int, int, bytes]]:
    """Step 2 for one segment: (first offset, rows, tombstones removed, Arrow IPC stream)
    chunks of the records that survive, in offset order. The tombstone count rides on the
    segment's last chunk (an empty chunk carries it if nothing survives)."""
    winners = winners.cast(pa.int64())
    seg = _open_segment(task)
    removed = 0
    pending: list[pa.RecordBatch] = []
    pending_bytes = 0
    try:
        for batch in seg.read(task.base_offset, task.next_offset):
            offsets = batch.column("offset")
            keep = pc.is_in(offsets, value_set=winners)
            if task.tombstones_below > offsets[0].as_py():
                tombstone = pc.and_(
                    pc.is_null(batch.column("value")), pc.less(offsets, task.tombstones_below)
                )
                removed += pc.sum(pc.and_(keep, tombstone)).as_py() or 0
                keep = pc.and_(keep, pc.invert(tombstone))
            kept = batch.filter(keep)
            if kept.num_rows == 0:
                continue
            pending.append(kept)
            pending_bytes += kept.nbytes
            if pending_bytes >= CHUNK_BYTES:
                first = pending[0].column("offset")[0].as_py()
                rows = sum(b.num_rows for b in pending)
                chunk, pending, pending_bytes = _ipc(pending), [], 0
                yield first, rows, 0, chunk
    finally:
        seg.close()
    if pending:
        first = pending[0].column("offset")[0].as_py()
        yield first, sum(b.num_rows for b in pending), removed, _ipc(pending)
    elif removed:
        yield task.base_offset, 0, removed, b""


# ---------------------------------------------------------------------- step 3


def attempt_name(planned: str, attempt: int) -> str:
    """The output name for a task attempt: the planned generation plus the attempt number
    (the planner leaves every generation above the planned one unused)."""
    parsed = names.parse_segment_name(planned)
    if parsed is None:
        raise ValueError(f"{planned!r} is not a segment name")
    return names.segment_name(
        parsed.base_offset, kind=parsed.kind, generation=parsed.generation + attempt
    )


class GroupWriter:
    """Step 3: writes one output group from its chunks, which must come in offset order."""

    def __init__(self, task: GroupTask, *, attempt: int = 0) -> None:
        self.task = task
        fs, path = _partition_path(task.root, task.topic, task.partition)
        self.name = attempt_name(task.name, attempt)
        self._writer = SealedWriter(fs, path, self.name, row_group_rows=task.row_group_rows)
        self._last = task.base_offset - 1
        self._first_tombstone = -1
        self._removed = 0

    def _bad(self, msg: str) -> CompactionOutputError:
        t = self.task
        return CompactionOutputError(f"{t.topic}-{t.partition} {self.name}: {msg}")

    def write_chunk(self, data: bytes | pa.Buffer | None, tombstones_removed: int = 0) -> None:
        """Write one chunk of ``kept_chunks`` (an Arrow IPC stream; empty or None: none)."""
        self._removed += tombstones_removed
        if data is None or len(data) == 0:
            return
        for batch in pa.ipc.open_stream(data):
            if batch.num_rows == 0:
                continue
            offsets = batch.column("offset")
            first, last = offsets[0].as_py(), offsets[-1].as_py()
            if first <= self._last or last >= self.task.next_offset:
                raise self._bad(
                    f"records {first}..{last} arrive after {self._last} or past the output's "
                    f"end {self.task.next_offset}"
                )
            if self._first_tombstone < 0:
                nulls = pc.is_null(batch.column("value"))
                i = pc.index(nulls, True).as_py()
                if i is not None and i >= 0:
                    self._first_tombstone = int(offsets[i].as_py())
            self._writer.write(batch)
            self._last = last

    def close(self) -> GroupResult:
        stats = self._writer.close()
        crashpoints.hit("compaction.after_segment_write")
        return GroupResult(
            **dataclasses.asdict(stats),
            group=self.task.group,
            first_tombstone=self._first_tombstone,
            tombstones_removed=self._removed,
        )

    def abandon(self) -> None:
        self._writer.abandon()


def write_empty(task: GroupTask, tombstones_removed: int = 0) -> GroupResult:
    """An output group nothing survived in: an empty sealed segment covering its range."""
    writer = GroupWriter(task)
    writer.write_chunk(b"", tombstones_removed)
    result = writer.close()
    assert result.records == 0 and result.min_timestamp == NO_TIMESTAMP
    return result
