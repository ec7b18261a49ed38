"""``spark.read.format("sparklog")``: a batch read of offset ranges, straight from storage.

The driver (``partitions``) resolves the subscription and the offset bounds from the
manifests and high watermarks, and splits every partition's range into Spark partitions of
at most ``maxRecordsPerPartition`` offsets. Executors (``read``) open the storage root
themselves and yield Arrow batches in the Kafka source's columns; only plain data crosses
the Spark boundary.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from sparklog.datasource.options import BatchOptions, Timestamps
from sparklog.errors import OffsetOutOfRangeError, OptionError, UnknownTopicError
from sparklog.storage import Storage
from sparklog.storage.reader import LogView, PartitionReader

log = logging.getLogger(__name__)

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
_TS_US = pa.timestamp("us", tz="UTC")
COALESCE_ROWS = 65_536
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition: what one Spark task reads."""

    path: str
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    check_crcs: bool = True


#: the stored columns a read needs (the producer columns are the broker's business)
READ_COLUMNS = ["offset", "timestamp", "timestamp_type", "key", "value"]


def kafka_columns(
    batch: pa.RecordBatch, topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """A stored batch in the Kafka source's columns (timestamps in microseconds)."""
    n = batch.num_rows
    arrays = [
        batch.column("key"),
        batch.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        batch.column("offset"),
        batch.column("timestamp").cast(_TS_US),
        batch.column("timestamp_type").cast(pa.int32()),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        arrays.append(batch.column("headers").cast(_HEADERS))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)


@dataclass
class Pushed:
    """What pushed filters allow a scan to skip: partitions, an offset window, and records
    before the first one at or after a timestamp (timestamps need not be monotonic, so only
    a lower bound on time can narrow a range; the time index finds where it starts)."""

    partitions: set[int] | None = None
    offset_lo: int = 0
    offset_hi: int = 2**63 - 1
    timestamp_lo_ms: int | None = None


def _ms(value: object) -> int | None:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return None


def _push(pushed: Pushed, f: Filter) -> None:
    attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if len(attr) != 1:
        return
    name, value = attr[0], getattr(f, "value", 0)
    if name == "partition":
        wanted: set[int] | None = None
        if isinstance(f, EqualTo):
            wanted = {int(value)}
        elif isinstance(f, In):
            wanted = {int(v) for v in f.value}
        if wanted is not None:
            pushed.partitions = wanted if pushed.partitions is None else pushed.partitions & wanted
    elif name == "offset":
        if isinstance(f, In):
            vals = [int(v) for v in f.value]
            lo, hi = (min(vals), max(vals) + 1) if vals else (0, 0)
        else:
            v = int(value)
            lo, hi = {
                EqualTo: (v, v + 1),
                GreaterThan: (v + 1, 2**63 - 1),
                GreaterThanOrEqual: (v, 2**63 - 1),
                LessThan: (0, v),
                LessThanOrEqual: (0, v + 1),
            }.get(type(f), (0, 2**63 - 1))
        pushed.offset_lo, pushed.offset_hi = max(pushed.offset_lo, lo), min(pushed.offset_hi, hi)
    elif name == "timestamp" and isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
        ms = _ms(value)
        if ms is not None:
            current = pushed.timestamp_lo_ms
            pushed.timestamp_lo_ms = ms if current is None else max(current, ms)


def start_by_timestamp(
    view: LogView, spec: Timestamps, topic: str, partition: int, default: int, strategy: str
) -> int:
    """The first offset at or after the partition's starting time (``default`` if the
    options give it none); no such record: an error, or the latest offset with
    ``startingOffsetsByTimestampStrategy=latest`` (Spark's Kafka source's rule)."""
    ms = spec.of(topic, partition)
    if ms is None:
        return default
    found = view.offset_for_timestamp(ms)
    if found is not None:
        return found
    if strategy == "latest":
        return view.high_watermark
    raise OffsetOutOfRangeError(
        f"{topic}-{partition}: no record has a timestamp at or after {ms}; set "
        "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
    )


class SparkLogBatchReader(DataSourceReader):
    def __init__(self, options: BatchOptions) -> None:
        self.options = options
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Narrow the scan with filters on partition, offset and timestamp (served from the
        manifest and the time index); Spark still evaluates every filter on what is read."""
        for f in filters:
            _push(self.pushed, f)
        return filters

    def _topic_partitions(self, storage: Storage) -> list[tuple[str, int]]:
        sub = self.options.subscription
        if sub.assign:
            for t, p in sub.assign:
                storage.topics.check_partition(t, p)
            return list(sub.assign)
        if sub.pattern is not None:
            rx = re.compile(sub.pattern)
            topics = [t for t in storage.topics.list() if rx.fullmatch(t)]
        else:
            topics = list(sub.topics)
        out = []
        for t in topics:
            try:
                meta = storage.topics.get(t)
            except UnknownTopicError as e:
                raise OptionError(f"option subscribe: {e}") from None
            out += [(t, p) for p in range(meta.partitions)]
        return out

    def _bound(
        self, spec: str | dict[str, dict[int, int]], topic: str, partition: int,
        start: int, end: int, default: int,
    ) -> int:  # fmt: skip
        if isinstance(spec, str):
            return start if spec == "earliest" else end
        value = spec.get(topic, {}).get(partition, default)
        return start if value == -2 else end if value == -1 else value

    def partitions(self) -> list[OffsetRange]:
        o = self.options
        storage = Storage(o.path)
        ranges: list[OffsetRange] = []
        pushed = self.pushed
        for topic, p in self._topic_partitions(storage):
            if pushed.partitions is not None and p not in pushed.partitions:
                continue
            view = PartitionReader(storage.fs, storage.root, topic, p).view()
            lo, hi = view.log_start_offset, view.high_watermark
            start = self._bound(o.starting, topic, p, lo, hi, -2)
            if o.starting_timestamps is not None:
                start = start_by_timestamp(view, o.starting_timestamps, topic, p, start,
                                           o.timestamp_strategy)  # fmt: skip
            end = self._bound(o.ending, topic, p, lo, hi, -1)
            if o.ending_timestamps is not None:
                ms = o.ending_timestamps.of(topic, p)
                found = None if ms is None else view.offset_for_timestamp(ms)
                end = hi if found is None else found
            if start < lo:
                if o.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{topic}-{p}: offsets {start}..{lo - 1} were removed by retention "
                        f"(log start {lo}); set failOnDataLoss=false to read from {lo}"
                    )
                log.warning("%s-%d: offsets %d..%d are gone; reading from %d",
                            topic, p, start, lo - 1, lo)  # fmt: skip
                start = lo
            end = min(end, hi, pushed.offset_hi)
            start = max(start, pushed.offset_lo)
            if pushed.timestamp_lo_ms is not None and start < end:
                first = view.offset_for_timestamp(pushed.timestamp_lo_ms)
                start = end if first is None else max(start, first)
            step = o.max_records_per_partition
            for s in range(start, end, step):
                ranges.append(OffsetRange(o.path, topic, p, s, min(s + step, end),
                                          o.include_headers, o.fail_on_data_loss,
                                          o.check_crcs))  # fmt: skip
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # no ranges at all: Spark still runs one task, with a default
        return read_range(partition)


def read_range(partition: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one offset range, in the Kafka source's columns (runs in executors)."""
    storage = Storage(partition.path)
    view = PartitionReader(
        storage.fs,
        storage.root,
        partition.topic,
        partition.partition,
        verify_checksums=partition.check_crcs,
    ).view()
    start = partition.start
    if start < view.log_start_offset:
        if partition.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{partition.topic}-{partition.partition}: offsets {start}.."
                f"{view.log_start_offset - 1} were removed while the query ran"
            )
        start = view.log_start_offset
    columns = READ_COLUMNS + (["headers"] if partition.include_headers else [])
    for batch in coalesce(view.batches(start, partition.end, columns=columns)):
        yield kafka_columns(batch, partition.topic, partition.partition, partition.include_headers)


def coalesce(
    batches: Iterable[pa.RecordBatch], rows: int = COALESCE_ROWS
) -> Iterator[pa.RecordBatch]:
    """Runs of small batches joined into batches of about ``rows`` rows.

    The active segment holds one frame per produce batch - often a handful of records - and
    every batch handed to Spark pays a fixed cost on both sides of the Python worker, so
    thousands of tiny frames cost far more than their rows. Large batches pass unchanged.
    """
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if not pending and batch.num_rows >= rows:
            yield batch
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.concat_batches(pending)
            pending, count = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
