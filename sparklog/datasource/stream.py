"""``spark.readStream.format("sparklog")``: micro-batches of offset ranges.

Spark 4.2 or newer gives everything below; under Spark 4.1 (no admission control for Python
sources, ``sparklog.datasource.ADMISSION_CONTROL``) each micro-batch reads all that is
there, ``maxOffsetsPerTrigger``/``minOffsetsPerTrigger`` are refused, ``Trigger.AvailableNow``
runs through Spark's own wrapper, and the group is committed by ``commit`` (when Spark plans
the next batch) rather than as each batch ends.

Offsets are JSON ``{"topic": {"partition": next offset}}`` as in Spark's Kafka source.
Admission control: ``maxOffsetsPerTrigger`` becomes the default read limit
(``ReadMaxRows``); a limit is shared between partitions in proportion to their backlog, so
a batch holds exactly the limit when that much is available. ``minOffsetsPerTrigger`` holds
a trigger back until that many records are there or ``maxTriggerDelay`` (default 15m) has
passed since the last batch. ``Trigger.AvailableNow``
reads up to the high watermarks seen when the query starts. Typed keys and values
(``valueFormat``): the reader schemas are those of the query's start, for every
micro-batch; records written with a schema registered later are resolved to them (their
new fields dropped) and the executors fetch such new writer schemas when they meet them;
a query sees new fields when it is started again. Partitions added to a topic,
and topics matching a pattern later, are picked up from their log start. With ``group``,
``latestOffset(start)`` and ``commit`` commit the end of the last finished batch to the
consumer group (``sparklog.datasource.group_offsets``, which says when and by whom), so
Kafka tools and ``sparklog groups describe`` show the query's lag; the listener in the
driver (``sparklog.datasource.progress``) commits each batch's end as soon as Spark
finishes it. The Spark checkpoint stays the source of truth for the query itself, and a
failed commit of the group's offsets only logs a warning. With
``kafka.bootstrap.servers``, every topic is checked once, when it is first planned, for the
principal's READ permission (the broker's ACLs; executors read files directly).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from sparklog.datasource import ADMISSION_CONTROL

if ADMISSION_CONTROL or TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
else:  # Spark 4.1: no admission control; Spark runs AvailableNow with its own wrapper

    class SupportsTriggerAvailableNow:  # the mixin's name, with nothing in it
        pass


from sparklog.datasource.group_offsets import REPORT_KEY, GroupOffsetCommitter, group_report
from sparklog.datasource.offsets import SparkOffsets as Offsets
from sparklog.datasource.offsets import StreamOffsets, TopicPartition
from sparklog.datasource.options.reads import StreamOptions
from sparklog.datasource.plan import ReadPlanner
from sparklog.datasource.scan import OffsetRange, read_partition, with_decoding
from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog.kafka.security_admin import require_read_access
from sparklog.schemas.codec import Decoding
from sparklog.storage.reader import LogView


def share_limit(
    start: dict[TopicPartition, int], latest: dict[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
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
    """See the module docstring. Each ``latestOffset`` reads every partition's bounds once
    (``ReadPlanner.snapshot``); ``reportLatestOffset`` and ``partitions`` of the same
    micro-batch use what it read. A subscribed topic that does not exist when the query
    starts is an error; one deleted while it runs, or deleted and created again, is data
    loss (``ReadPlanner.continue_from``), which ``failOnDataLoss`` decides."""

    def __init__(self, options: StreamOptions, decoding: Decoding | None = None) -> None:
        self.options = options
        #: typed columns: reader schemas fixed when the query started (``source``)
        self.decoding = decoding
        self._plan = ReadPlanner.of(options)
        self._target: dict[TopicPartition, int] | None = None
        #: the group's committer, in this worker (``sparklog.datasource.group_offsets``)
        self._group = (
            GroupOffsetCommitter(options.group, options.client)
            if options.group and options.client is not None
            else None
        )
        self._last_batch = time.monotonic()
        self._log_starts: dict[TopicPartition, int] | None = None
        self._latest_seen: dict[TopicPartition, int] | None = None
        self._topic_ids: dict[str, str] = {}
        self._continued: tuple[Offsets, dict[TopicPartition, int]] | None = None
        #: topics the broker said this principal may READ (asked once each)
        self._read_checked: set[str] = set()

    def _bounds(self, *, strict: bool = False) -> tuple[dict[TopicPartition, LogView], set[str]]:
        """Every partition's view, read once, remembered for the micro-batch's other calls;
        and the topics that were deleted and created again since the last read."""
        views = self._plan.snapshot(strict=strict)
        ids = self._plan.topic_ids
        unchecked = sorted(set(ids) - self._read_checked)
        if self.options.client is not None and unchecked:
            require_read_access(self.options.client, unchecked)
            self._read_checked.update(unchecked)
        recreated = {t for t, i in ids.items() if self._topic_ids.get(t, i) != i}
        self._topic_ids = dict(ids)
        self._log_starts = {tp: v.log_start_offset for tp, v in views.items()}
        self._latest_seen = {tp: v.high_watermark for tp, v in views.items()}
        return views, recreated

    def _within_target(self, latest: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``latest`` capped at an AvailableNow run's target (partitions beyond it dropped)."""
        if self._target is not None:
            latest = {
                k: min(v, self._target.get(k, 0)) for k, v in latest.items() if k in self._target
            }
        return latest

    def initialOffset(self) -> Offsets:
        o = self.options
        views, _ = self._bounds(strict=True)
        self._plan.check_offsets(
            "startingOffsets", o.starting if o.starting != "group" else "", views
        )
        if o.starting_timestamps is not None:
            return StreamOffsets(
                {
                    tp: self._plan.start_by_timestamp(
                        v, o.starting_timestamps, tp, v.high_watermark, o.timestamp_strategy
                    )
                    for tp, v in views.items()
                }
            ).to_spark()
        if o.starting == "group":
            assert o.client is not None and o.group
            with KafkaClient(o.client) as c:
                committed = admin.committed_offsets(c, o.group)
            return StreamOffsets(
                {tp: committed.get(tp, v.log_start_offset) for tp, v in views.items()}
            ).to_spark()
        return StreamOffsets(
            {tp: ReadPlanner.offset(o.starting, tp, v, -2) for tp, v in views.items()}
        ).to_spark()

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as ``ReadMaxRows``; ``minOffsetsPerTrigger`` alone as
        ``ReadMinRows`` (with both, the minimum is applied in ``latestOffset``); else all
        available. ``Trigger.AvailableNow`` passes ``ReadAllAvailable`` instead, which skips
        the minimum, as Spark's Kafka source does."""
        o = self.options
        if o.max_offsets_per_trigger:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets | None = None, limit: ReadLimit | None = None) -> Offsets:
        if start is None:  # Spark 4.1 asks without a start: everything there, no limit
            self._bounds()
            assert self._latest_seen is not None
            return StreamOffsets(self._within_target(self._latest_seen)).to_spark()
        # ``start`` is the end of the last batch Spark completed: commit it to the group
        # here too, because Spark calls ``commit`` for a batch only once it plans the next
        # one, so the last batch of a query (an AvailableNow run) would never be committed.
        self._commit_group(start)
        views, recreated = self._bounds()
        begin = self._plan.continue_from(StreamOffsets.from_spark(start).flat(), views, recreated)
        self._continued = (start, dict(begin))
        assert self._latest_seen is not None
        latest = self._within_target(self._latest_seen)
        for tp in latest:  # new partitions start at their log start
            begin.setdefault(tp, views[tp].log_start_offset)
        if isinstance(limit, ReadMaxRows):
            latest = share_limit(begin, latest, int(limit.max_rows))
        minimum = self.options.min_offsets_per_trigger
        if minimum and not isinstance(limit, ReadAllAvailable):
            # minOffsetsPerTrigger: wait for enough records, but no longer than the delay
            available = sum(max(v - begin[k], 0) for k, v in latest.items())
            waited_ms = (time.monotonic() - self._last_batch) * 1000
            if available < minimum and waited_ms < self.options.max_trigger_delay_ms:
                return StreamOffsets(begin).to_spark()
        end = {k: max(v, begin[k]) for k, v in latest.items()}
        if end != begin:
            self._last_batch = time.monotonic()
        return StreamOffsets(end).to_spark()

    def reportLatestOffset(self) -> dict[str, Any]:
        # Spark asks right after ``latestOffset``: report the high watermarks read there,
        # as Spark's Kafka source reports the offsets its latestOffset fetched. The report
        # only shows in the query's progress (``latestOffset``), so under a key no topic
        # name can have it also carries the data loss skipped so far, and the group whose
        # offsets the listener commits when a batch is done (``group_offsets``).
        if self._latest_seen is None:
            self._bounds()
        assert self._latest_seen is not None
        report: dict[str, Any] = StreamOffsets(self._latest_seen).to_spark()
        extra: dict[str, Any] = {}
        o = self.options
        if o.group and o.client is not None:
            extra.update(group_report(o.group, o.client))
        if self._plan.data_loss_events:
            extra.update(
                dataLossEvents=self._plan.data_loss_events,
                offsetsSkipped=self._plan.offsets_skipped,
            )
        if extra:
            report[REPORT_KEY] = extra
        return report

    def prepareForTriggerAvailableNow(self) -> None:
        self._bounds()
        self._target = dict(self._latest_seen or {})

    def partitions(self, start: Offsets, end: Offsets) -> list[OffsetRange]:
        stop = StreamOffsets.from_spark(end).flat()
        log_starts = self._log_starts
        if (
            log_starts is None
            or self._continued is None
            or self._continued[0] != start
            or any(tp not in log_starts for tp in stop)
        ):  # a batch replayed after a restart, or a partition new since
            views, recreated = self._bounds()
            begin = self._plan.continue_from(
                StreamOffsets.from_spark(start).flat(), views, recreated
            )
            log_starts = self._log_starts
            assert log_starts is not None
        else:
            begin = dict(self._continued[1])
        for tp in stop:  # partitions that appeared in this batch start at their log start
            begin.setdefault(tp, log_starts.get(tp, stop[tp]))
        return with_decoding(self._plan.ranges(begin, stop, log_starts), self.decoding)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: Offsets) -> None:
        self._commit_group(end)

    def _commit_group(self, end: Offsets) -> None:
        if self._group is None:
            return
        offsets = StreamOffsets.from_spark(end)
        if self._log_starts is not None:  # partitions of deleted topics cannot be committed
            offsets = offsets.restricted_to(self._log_starts)
        self._group.commit(offsets)

    def stop(self) -> None:
        return None
