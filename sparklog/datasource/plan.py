"""The read planner of ``format("sparklog")``, for batch and stream reads (driver side).

One ``ReadPlanner`` per reader does what both kinds of read need, once per plan:

- ``topic_partitions``: the subscription (``subscribe``, ``subscribePattern``, ``assign``)
  resolved against the topics in storage;
- ``snapshot``: one consistent view of every subscribed partition (manifest and high
  watermark, read together): its bounds ``[log start, high watermark)`` and, for time
  lookups, its time index. A batch plan and a micro-batch each read it once. The root
  is opened and checked once per planner (in the process that plans), and each task
  carries the manifest version its range was planned on, where the executor's search for
  the latest starts: on an object store neither a micro-batch's planning nor a task lists
  a directory (``sparklog.storage.versioned``);
- ``offset`` / ``start_by_timestamp``: a ``startingOffsets``/``endingOffsets`` spec, or a
  starting time, resolved for one partition (Spark's Kafka source's rules);
- ``checked_start``: the ``failOnDataLoss`` rule for offsets below the log start;
- ``split``: each partition's range cut into ``OffsetRange`` tasks of at most
  ``maxRecordsPerPartition`` offsets (``sparklog.datasource.scan`` reads them);
- ``batch_spans``: the whole range of every partition a batch read (or an export) covers,
  narrowed by pushed filters (``Pushed``).
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from sparklog.datasource.offsets import TopicPartition
from sparklog.datasource.options.reads import BatchOptions, StreamOptions, Subscription, Timestamps
from sparklog.datasource.scan import OffsetRange
from sparklog.errors import (
    OffsetOutOfRangeError,
    OptionError,
    UnknownPartitionError,
    UnknownTopicError,
)
from sparklog.storage import Storage
from sparklog.storage.reader import LogView, PartitionReader

log = logging.getLogger(__name__)

#: ``"earliest"``/``"latest"``, or per-partition offsets (-2 earliest, -1 latest)
OffsetSpec = str | dict[str, dict[int, int]]
EARLIEST, LATEST = -2, -1
NO_OFFSET_LIMIT = 2**63 - 1


@dataclass
class Pushed:
    """What pushed filters allow a scan to skip: partitions, an offset window, and records
    before the first one at or after a timestamp (timestamps need not be monotonic, so only
    a lower bound on time can narrow a range; the time index finds where it starts)."""

    partitions: set[int] | None = None
    offset_lo: int = 0
    offset_hi: int = NO_OFFSET_LIMIT
    timestamp_lo_ms: int | None = None

    def add(self, f: Filter) -> None:
        """Narrow by ``f`` if it is a filter on partition, offset or timestamp."""
        attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
        if len(attr) != 1:
            return
        name, value = attr[0], getattr(f, "value", 0)
        if name == "partition":
            self._partitions(f, value)
        elif name == "offset":
            self._offsets(f, value)
        elif (
            name == "timestamp"
            and isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo)
            and isinstance(value, datetime.datetime)
        ):
            ms = int(value.timestamp() * 1000)
            current = self.timestamp_lo_ms
            self.timestamp_lo_ms = ms if current is None else max(current, ms)

    def _partitions(self, f: Filter, value: object) -> None:
        wanted: set[int] | None = None
        if isinstance(f, EqualTo):
            wanted = {int(value)}  # type: ignore[call-overload]
        elif isinstance(f, In):
            wanted = {int(v) for v in f.value}
        if wanted is not None:
            self.partitions = wanted if self.partitions is None else self.partitions & wanted

    def _offsets(self, f: Filter, value: object) -> None:
        if isinstance(f, In):
            vals = [int(v) for v in f.value]
            lo, hi = (min(vals), max(vals) + 1) if vals else (0, 0)
        else:
            v = int(value)  # type: ignore[call-overload]
            lo, hi = {
                EqualTo: (v, v + 1),
                GreaterThan: (v + 1, NO_OFFSET_LIMIT),
                GreaterThanOrEqual: (v, NO_OFFSET_LIMIT),
                LessThan: (0, v),
                LessThanOrEqual: (0, v + 1),
            }.get(type(f), (0, NO_OFFSET_LIMIT))
        self.offset_lo, self.offset_hi = max(self.offset_lo, lo), min(self.offset_hi, hi)


class ReadPlanner:
    """See the module docstring. Plain data only: a reader may be pickled with it."""

    def __init__(
        self,
        path: str,
        subscription: Subscription,
        *,
        fail_on_data_loss: bool,
        include_headers: bool,
        max_records_per_partition: int,
        check_crcs: bool,
        read_committed: bool = True,
    ) -> None:
        self.path = path
        self.subscription = subscription
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.max_records_per_partition = max_records_per_partition
        self.check_crcs = check_crcs
        self.read_committed = read_committed
        self.topic_ids: dict[str, str] = {}
        #: the manifest version each partition's last snapshot read (for the tasks)
        self.manifest_versions: dict[TopicPartition, int] = {}
        self._storage: Storage | None = None  # opened once; never pickled
        #: data loss seen so far with failOnDataLoss=false: times, and offsets known skipped
        self.data_loss_events = 0
        self.offsets_skipped = 0

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_storage"] = None  # a client of the store: each process opens its own
        return state

    def storage(self) -> Storage:
        """The storage root, opened and checked (``NoStorageError`` naming it) once."""
        if self._storage is None:
            self._storage = Storage(self.path).require()
        return self._storage

    @classmethod
    def of(cls, o: BatchOptions | StreamOptions) -> ReadPlanner:
        return cls(
            o.path,
            o.subscription,
            fail_on_data_loss=o.fail_on_data_loss,
            include_headers=o.include_headers,
            max_records_per_partition=o.max_records_per_partition,
            check_crcs=o.check_crcs,
            read_committed=o.read_committed,
        )

    # ------------------------------------------------------------------ what and where

    def topic_partitions(self, storage: Storage, *, strict: bool = True) -> list[TopicPartition]:
        """The subscribed partitions that exist, and each topic's id in ``topic_ids``. A
        topic (or assigned partition) that does not exist is an error naming the option,
        or with ``strict=False`` (a running stream: deleted meanwhile) left out."""
        sub = self.subscription
        self.topic_ids = {}
        if sub.assign:
            out = []
            for t, p in sub.assign:
                try:
                    self.topic_ids[t] = storage.topics.check_partition(t, p).topic_id
                except (UnknownTopicError, UnknownPartitionError) as e:
                    if strict:
                        raise OptionError(f"option assign: {e}") from None
                    continue
                out.append((t, p))
            return out
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
                if strict:
                    raise OptionError(f"option subscribe: {e}") from None
                continue
            self.topic_ids[t] = meta.topic_id
            out += [(t, p) for p in range(meta.partitions)]
        return out

    def snapshot(self, *, strict: bool = True) -> dict[TopicPartition, LogView]:
        """A view of every subscribed partition, each read once (see the module docstring);
        the storage root must hold sparklog storage (``NoStorageError`` naming it)."""
        storage = self.storage()
        views = {
            (t, p): PartitionReader(storage.fs, storage.root, t, p).view(
                committed=self.read_committed
            )
            for t, p in self.topic_partitions(storage, strict=strict)
        }
        self.manifest_versions = {tp: v.manifest.version for tp, v in views.items()}
        return views

    def check_offsets(
        self, name: str, spec: OffsetSpec, views: Mapping[TopicPartition, LogView]
    ) -> None:
        """Per-partition offsets ``spec`` (option ``name``) names only subscribed partitions
        and no offset past a partition's high watermark (Spark's Kafka source's rules)."""
        if isinstance(spec, str):
            return
        for t, parts in spec.items():
            for p, o in parts.items():
                view = views.get((t, p))
                if view is None:
                    raise OptionError(
                        f"option {name} names {t}-{p}, which {self.subscription} does not "
                        "cover (or which does not exist)"
                    )
                if o > view.high_watermark:
                    raise OptionError(
                        f"option {name}: {t}-{p} offset {o} is past the latest offset "
                        f"{view.high_watermark}"
                    )

    # ------------------------------------------------------------------ offsets

    @staticmethod
    def offset(spec: OffsetSpec, tp: TopicPartition, view: LogView, default: int) -> int:
        """``spec`` resolved for ``tp``; a partition it does not list takes ``default``."""
        lo, hi = view.log_start_offset, view.high_watermark
        if isinstance(spec, str):
            return lo if spec == "earliest" else hi
        value = spec.get(tp[0], {}).get(tp[1], default)
        return lo if value == EARLIEST else hi if value == LATEST else value

    @staticmethod
    def start_by_timestamp(
        view: LogView, spec: Timestamps, tp: TopicPartition, default: int, strategy: str
    ) -> int:
        """The first offset at or after the partition's starting time (``default`` if the
        options give it none); no such record: an error, or the latest offset with
        ``startingOffsetsByTimestampStrategy=latest`` (Spark's Kafka source's rule)."""
        ms = spec.of(*tp)
        if ms is None:
            return default
        found = view.offset_for_timestamp(ms)
        if found is not None:
            return found
        if strategy == "latest":
            return view.high_watermark
        raise OffsetOutOfRangeError(
            f"{tp[0]}-{tp[1]}: no record has a timestamp at or after {ms}; set "
            "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
        )

    def data_loss(self, what: str, instead: str, skipped: int = 0) -> None:
        """Offsets the query should have read are gone (``what``): with failOnDataLoss=true
        an error, else a warning saying what happens ``instead``, counted in
        ``data_loss_events`` and ``offsets_skipped``."""
        if self.fail_on_data_loss:
            raise OffsetOutOfRangeError(f"{what}; set failOnDataLoss=false to {instead}")
        self.data_loss_events += 1
        self.offsets_skipped += skipped
        log.warning("%s; %s (failOnDataLoss=false)", what, instead)

    def checked_start(self, tp: TopicPartition, start: int, log_start: int) -> int:
        """``start``, or with ``failOnDataLoss=false`` the log start if retention removed
        offsets from ``start`` on (with ``true`` that is an error naming them)."""
        if start >= log_start:
            return start
        self.data_loss(
            f"{tp[0]}-{tp[1]}: offsets {start}..{log_start - 1} were removed by retention "
            f"(log start {log_start})",
            f"read from {log_start}",
            log_start - start,
        )
        return log_start

    def continue_from(
        self,
        begin: Mapping[TopicPartition, int],
        views: Mapping[TopicPartition, LogView],
        recreated: set[str],
    ) -> dict[TopicPartition, int]:
        """Where a stream goes on after ``begin`` (the end of its last batch), given the
        partitions there now (``snapshot(strict=False)``). Data loss, reported by
        ``data_loss``: a partition that is gone (its topic was deleted) is dropped; one whose
        topic was deleted and created again (``recreated``, or its offsets went back below
        ``begin``) restarts at its log start, as Spark's Kafka source does."""
        gone = [tp for tp in sorted(begin) if tp not in views]
        for topic in sorted({t for t, _ in gone}):
            parts = ", ".join(f"{t}-{p} from {begin[(t, p)]}" for t, p in gone if t == topic)
            self.data_loss(
                f"topic {topic!r} was deleted while the query ran (not read: {parts})",
                "go on without it",
            )
        out = {}
        for tp, offset in begin.items():
            view = views.get(tp)
            if view is None:
                continue
            if tp[0] in recreated or offset > view.high_watermark:
                self.data_loss(
                    f"{tp[0]}-{tp[1]}: the topic was deleted and created again while the "
                    f"query ran (offsets went from {offset} to {view.high_watermark})",
                    f"read the new topic from its start ({view.log_start_offset})",
                )
                offset = view.log_start_offset
            out[tp] = offset
        return out

    # ------------------------------------------------------------------ tasks

    def split(self, spans: Mapping[TopicPartition, tuple[int, int]]) -> list[OffsetRange]:
        """Every span ``[start, end)`` cut into tasks of at most maxRecordsPerPartition."""
        step = self.max_records_per_partition
        flags = (self.include_headers, self.fail_on_data_loss, self.check_crcs, self.read_committed)
        return [
            OffsetRange(
                self.path,
                t,
                p,
                lo,
                min(lo + step, end),
                *flags,
                manifest_version=self.manifest_versions.get((t, p)),
            )
            for (t, p), (start, end) in sorted(spans.items())
            for lo in range(start, end, step)
        ]

    def ranges(
        self,
        begin: Mapping[TopicPartition, int],
        end: Mapping[TopicPartition, int],
        log_starts: Mapping[TopicPartition, int],
    ) -> list[OffsetRange]:
        """A micro-batch's tasks: ``[begin, end)`` per partition, starts checked against
        the log starts (``checked_start``)."""
        spans = {}
        for tp, stop in end.items():
            start = begin[tp]
            if start < stop and tp in log_starts:
                start = min(self.checked_start(tp, start, log_starts[tp]), stop)
            spans[tp] = (start, stop)
        return self.split(spans)

    def batch_spans(
        self, o: BatchOptions, pushed: Pushed | None = None
    ) -> dict[TopicPartition, tuple[int, int, LogView]]:
        """Every partition's ``[start, end)`` of a batch read, and the view it was planned
        on: the starting and ending options (checked: subscribed partitions, offsets not
        past the latest, start not after end), narrowed by ``pushed`` filters."""
        pushed = pushed or Pushed()
        views = self.snapshot()
        self.check_offsets("startingOffsets", o.starting, views)
        self.check_offsets("endingOffsets", o.ending, views)
        out = {}
        for tp, view in views.items():
            if pushed.partitions is not None and tp[1] not in pushed.partitions:
                continue
            lo, hi = view.log_start_offset, view.high_watermark
            start = self.offset(o.starting, tp, view, EARLIEST)
            if o.starting_timestamps is not None:
                start = self.start_by_timestamp(
                    view, o.starting_timestamps, tp, start, o.timestamp_strategy
                )
            end = self.offset(o.ending, tp, view, LATEST)
            if o.ending_timestamps is not None:
                ms = o.ending_timestamps.of(*tp)
                found = None if ms is None else view.offset_for_timestamp(ms)
                end = hi if found is None else found
            if start > end:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: the starting offset {start} is after the ending offset "
                    f"{end} (options startingOffsets/startingTimestamp and endingOffsets/"
                    "endingTimestamp)"
                )
            start = self.checked_start(tp, start, lo)
            end = min(end, hi, pushed.offset_hi)
            start = max(start, pushed.offset_lo)
            if pushed.timestamp_lo_ms is not None and start < end:
                first = view.offset_for_timestamp(pushed.timestamp_lo_ms)
                start = end if first is None else max(start, first)
            out[tp] = (start, end, view)
        return out
