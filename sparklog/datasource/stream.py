"""``spark.readStream.format("sparklog")``: micro-batches of offset ranges.

Offsets are JSON ``{"topic": {"partition": next offset}}`` as in Spark's Kafka source.
Admission control: ``maxOffsetsPerTrigger`` becomes the default read limit
(``ReadMaxRows``); a limit is shared between partitions in proportion to their backlog, so
a batch holds exactly the limit when that much is available. ``minOffsetsPerTrigger`` holds
a trigger back until that many records are there or ``maxTriggerDelay`` (default 15m) has
passed since the last batch. ``Trigger.AvailableNow``
reads up to the high watermarks seen when the query starts. Partitions added to a topic,
and topics matching a pattern later, are picked up from their log start. ``commit``
advances the consumer group's committed offsets through the broker, so Kafka tools and
``sparklog groups describe`` show the query's lag; the Spark checkpoint stays the source of
truth for the query itself, and a failed group commit only logs a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from sparklog.datasource.batch import (
    OffsetRange,
    SparkLogBatchReader,
    read_range,
    start_by_timestamp,
)
from sparklog.datasource.options import BatchOptions, StreamOptions
from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog.storage import Storage
from sparklog.storage.reader import PartitionReader

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]
GROUP_COMMIT_TIMEOUT_S = 10.0  # a courtesy commit must not hold a micro-batch up for long


def _flat(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nest(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def share_limit(
    start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int], limit: int
) -> dict[tuple[str, int], int]:
    """End offsets admitting at most ``limit`` offsets in total, in proportion to backlog."""
    backlog = {k: max(latest[k] - start.get(k, latest[k]), 0) for k in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    take = {k: (b * limit) // total for k, b in backlog.items()}
    left = limit - sum(take.values())
    for k in sorted(backlog, key=lambda k: backlog[k] - take[k], reverse=True):
        if left == 0:
            break
        if take[k] < backlog[k]:
            take[k] += 1
            left -= 1
    return {k: start.get(k, latest[k]) + take[k] for k in latest}


class SparkLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._target: dict[tuple[str, int], int] | None = None
        self._committed: dict[tuple[str, int], int] = {}
        self._last_batch = time.monotonic()
        self._latest_seen: dict[tuple[str, int], int] | None = None
        self._batch = SparkLogBatchReader(
            BatchOptions(
                options.path,
                options.subscription,
                "earliest",
                "latest",
                None,
                options.fail_on_data_loss,
                options.include_headers,
                options.max_records_per_partition,
            )
        )

    def _bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        storage = Storage(self.options.path)
        out = {}
        for topic, p in self._batch._topic_partitions(storage):
            view = PartitionReader(storage.fs, storage.root, topic, p).view()
            out[(topic, p)] = (view.log_start_offset, view.high_watermark)
        return out

    def _within_target(self, latest: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """``latest`` capped at an AvailableNow run's target (partitions beyond it dropped)."""
        if self._target is not None:
            latest = {k: min(v, self._target.get(k, 0)) for k, v in latest.items()
                      if k in self._target}  # fmt: skip
        return latest

    def initialOffset(self) -> Offsets:
        if self.options.starting_timestamps is not None:
            return self._initial_by_timestamp()
        bounds = self._bounds()
        starting = self.options.starting
        if starting == "earliest":
            return _nest({k: lo for k, (lo, _hi) in bounds.items()})
        if starting == "latest":
            return _nest({k: hi for k, (_lo, hi) in bounds.items()})
        if starting == "group":
            assert self.options.client is not None and self.options.group
            with KafkaClient(self.options.client) as c:
                committed = admin.committed_offsets(c, self.options.group)
            return _nest({k: committed.get(k, lo) for k, (lo, _hi) in bounds.items()})
        assert isinstance(starting, dict)
        flat = {}
        for (t, p), (lo, hi) in bounds.items():
            value = starting.get(t, {}).get(p, -2)
            flat[(t, p)] = lo if value == -2 else hi if value == -1 else value
        return _nest(flat)

    def _initial_by_timestamp(self) -> Offsets:
        spec = self.options.starting_timestamps
        assert spec is not None
        storage = Storage(self.options.path)
        flat = {}
        for topic, p in self._batch._topic_partitions(storage):
            view = PartitionReader(storage.fs, storage.root, topic, p).view()
            flat[(topic, p)] = start_by_timestamp(
                view, spec, topic, p, view.high_watermark, self.options.timestamp_strategy
            )
        return _nest(flat)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        # ``start`` is the end of the last batch Spark completed: commit it to the group
        # here too, because Spark calls ``commit`` for a batch only once it plans the next
        # one, so the last batch of a query (an AvailableNow run) would never be committed.
        self._commit_group(start)
        begin = _flat(start)
        bounds = self._bounds()
        self._latest_seen = {k: hi for k, (_lo, hi) in bounds.items()}
        latest = self._within_target(self._latest_seen)
        for k in latest:  # new partitions start at their log start
            begin.setdefault(k, bounds[k][0])
        if isinstance(limit, ReadMaxRows):
            latest = share_limit(begin, latest, int(limit.max_rows))
        minimum = self.options.min_offsets_per_trigger
        if minimum and not isinstance(limit, ReadAllAvailable):
            # minOffsetsPerTrigger: wait for enough records, but no longer than the delay
            available = sum(max(v - begin[k], 0) for k, v in latest.items())
            waited_ms = (time.monotonic() - self._last_batch) * 1000
            if available < minimum and waited_ms < self.options.max_trigger_delay_ms:
                return _nest(begin)
        end = {k: max(v, begin[k]) for k, v in latest.items()}
        if end != begin:
            self._last_batch = time.monotonic()
        return _nest(end)

    def reportLatestOffset(self) -> Offsets:
        # Spark asks right after ``latestOffset``: report the high watermarks read there,
        # as Spark's Kafka source reports the offsets its latestOffset fetched
        if self._latest_seen is None:
            self._latest_seen = {k: hi for k, (_lo, hi) in self._bounds().items()}
        return _nest(self._latest_seen)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {k: hi for k, (_lo, hi) in self._bounds().items()}

    def partitions(self, start: Offsets, end: Offsets) -> list[OffsetRange]:
        begin, stop = _flat(start), _flat(end)
        o = self.options
        ranges = []
        step = o.max_records_per_partition
        missing = [k for k in stop if k not in begin]
        if missing:  # partitions that appeared in this batch start at their log start
            bounds = self._bounds()
            begin.update({k: bounds[k][0] if k in bounds else stop[k] for k in missing})
        for (t, p), e in sorted(stop.items()):
            s = begin[(t, p)]
            for lo in range(s, e, step):
                ranges.append(OffsetRange(o.path, t, p, lo, min(lo + step, e),
                                          o.include_headers, o.fail_on_data_loss,
                                          o.check_crcs))  # fmt: skip
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(partition)

    def commit(self, end: Offsets) -> None:
        self._commit_group(end)

    def _commit_group(self, end: Offsets) -> None:
        if not (self.options.group and self.options.client):
            return
        flat = _flat(end)
        if flat == self._committed:
            return
        try:
            with KafkaClient(self.options.client, timeout_s=GROUP_COMMIT_TIMEOUT_S) as c:
                admin.commit_offsets(c, self.options.group, flat)
            self._committed = flat
        except Exception as e:  # the checkpoint is the query's truth; lag is a courtesy
            log.warning("committing offsets of group %s failed: %s", self.options.group, e)

    def stop(self) -> None:
        return None
