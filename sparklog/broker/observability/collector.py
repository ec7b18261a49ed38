"""What ``/metrics`` computes when scraped (``sparklog.broker.observability.metrics``
says what is reported and how): kafka_exporter's names, and sparklog's gauges of lag in
seconds and lag status, segments and the sealing backlog, the last retention and
compaction runs, leadership changes and lease renewals. ``BrokerCollector`` reads the
broker's state through ``MetricsSources`` only, on the scrape's worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from sparklog.broker.observability.lag import STATUSES, LagMonitor, worst
from sparklog.broker.replicas import in_sync, reported
from sparklog.errors import SparkLogError
from sparklog.storage import durability, jobruns, names

if TYPE_CHECKING:
    from sparklog.broker.coordinators.group_offsets import OffsetStore
    from sparklog.broker.coordinators.groups import GroupCoordinator
    from sparklog.broker.membership import ClusterMember
    from sparklog.broker.partitions import PartitionManager
    from sparklog.storage.reader import LogView

log = logging.getLogger(__name__)
_TS_CACHE = 4096  # (topic, partition, offset) -> record timestamp, for lag in seconds
_MISSING = object()


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


@dataclass(frozen=True)
class MetricsSources:
    """What the collector reads, and nothing else: the open partitions, the groups and
    their committed offsets, and in cluster mode the broker's view of the cluster."""

    node_id: int
    manager: PartitionManager
    coordinator: GroupCoordinator
    offsets: OffsetStore
    cluster: ClusterMember | None


class BrokerCollector:
    """The metrics computed when scraped (module docstring), from ``sources``."""

    def __init__(self, sources: MetricsSources, lag: LagMonitor, address: str) -> None:
        self.sources = sources
        self.lag = lag
        self.address = address  # this broker's (host:port of its first listener)
        self._ts: dict[tuple[str, int, int], int | None] = {}
        self._sampled_at = 0.0

    # ------------------------------------------------------------------ partitions

    def _partitions(self) -> list[tuple[str, int, int]]:
        """(topic, partition, leader) of every partition this broker reports."""
        s = self.sources
        if s.cluster is None:
            out = []
            for topic in s.manager.storage.topics.list():
                try:
                    meta = s.manager.topic(topic)
                except SparkLogError:  # deleted meanwhile
                    continue
                out += [(topic, p, s.node_id) for p in range(meta.partitions)]
            return out
        return [(t, p, s.node_id) for t, p in list(s.manager.handles)]

    def _view(self, topic: str, partition: int) -> LogView:
        handle = self.sources.manager.handles.get((topic, partition))
        if handle is not None:
            return handle.log.view()
        return self.sources.manager.follower_view(topic, partition)

    def _timestamp(self, view: LogView, topic: str, partition: int, offset: int) -> int | None:
        """The timestamp (ms) of the first record at or after ``offset`` (or after the log
        start, if retention removed ``offset``). Scrapes may run at once: the cache is
        read with ``get``, and a lost entry only costs a read."""
        offset = max(offset, view.log_start_offset)
        key = (topic, partition, offset)
        cached = self._ts.get(key, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        ts = None
        try:
            for batch in view.batches(offset, None, columns=["offset", "timestamp"]):
                if batch.num_rows:
                    ts = int(batch.column("timestamp").cast("int64")[0].as_py())
                    break
        except SparkLogError:
            ts = None
        if len(self._ts) >= _TS_CACHE:
            self._ts.clear()
        self._ts[key] = ts
        return ts

    # ------------------------------------------------------------------ collect

    def collect(self) -> Iterator[Metric]:
        s = self.sources
        now_s = time.time()
        yield from self._brokers()
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        yield from self._topics(offsets)
        yield from self._groups(offsets, now_s)
        yield from self._storage()
        yield from self._jobs()
        if s.cluster is not None:
            changes = CounterMetricFamily(
                "sparklog_leadership_changes", "Partitions this broker took over or gave up"
            )
            changes.add_metric([], s.cluster.leadership_changes)
            yield changes
            renewals = CounterMetricFamily(
                "sparklog_lease_renewals", "Refreshes of this broker's etcd lease"
            )
            renewals.add_metric([], s.cluster.coord.lease_renewals)
            yield renewals

    def _brokers(self) -> Iterator[Metric]:
        s = self.sources
        count = _gauge("kafka_brokers", "Number of Brokers in the Kafka Cluster.")
        info = _gauge("kafka_broker_info", "Information about the Kafka Broker.", ["address", "id"])
        if s.cluster is None:
            brokers = {s.node_id: self.address}
        else:
            brokers = {
                b.node_id: f"{b.host}:{b.port}" for b in list(s.cluster.view.brokers.values())
            }
        count.add_metric([], len(brokers))
        for node, address in sorted(brokers.items()):
            info.add_metric([address, str(node)], 1)
        yield count
        yield info

    def _topics(self, offsets: dict[tuple[str, int], tuple[int, int]]) -> Iterator[Metric]:
        s = self.sources
        parts = _gauge("kafka_topic_partitions", "Number of partitions for this Topic", ["topic"])
        current = _gauge(
            "kafka_topic_partition_current_offset",
            "Current Offset of a Broker at Topic/Partition",
            ["topic", "partition"],
        )
        oldest = _gauge(
            "kafka_topic_partition_oldest_offset",
            "Oldest Offset of a Broker at Topic/Partition",
            ["topic", "partition"],
        )
        leader = _gauge(
            "kafka_topic_partition_leader",
            "Leader Broker ID of this Topic/Partition",
            ["topic", "partition"],
        )
        replicas = _gauge(
            "kafka_topic_partition_replicas",
            "Number of Replicas for this Topic/Partition",
            ["topic", "partition"],
        )
        isr = _gauge(
            "kafka_topic_partition_in_sync_replica",
            "Number of In-Sync Replicas for this Topic/Partition",
            ["topic", "partition"],
        )
        counted: set[str] = set()
        for topic, p, node in self._partitions():
            try:
                view = self._view(topic, p)
            except (SparkLogError, OSError):  # deleted while scraped
                continue
            lp = [topic, str(p)]
            hw, start = view.high_watermark, view.log_start_offset
            offsets[(topic, p)] = (start, hw)
            current.add_metric(lp, hw)
            oldest.add_metric(lp, start)
            leader.add_metric(lp, node)
            n, in_sync_n = self._replicas(topic, p)
            replicas.add_metric(lp, n)
            isr.add_metric(lp, in_sync_n)
            if topic not in counted:
                counted.add(topic)
                with contextlib.suppress(SparkLogError):  # deleted while scraped
                    parts.add_metric([topic], s.manager.topic(topic).partitions)
        yield from (parts, current, oldest, leader, replicas, isr)

    def _replicas(self, topic: str, partition: int) -> tuple[int, int]:
        """(replicas, in-sync replicas) of a partition this broker leads, counted as
        Metadata lists them (``broker.replicas``): 1 and 1 on a single local copy."""
        cluster = self.sources.cluster
        if cluster is None:
            return 1, 1
        a = cluster.view.assignments.get((topic, partition))
        if a is None:
            return 1, 1
        redundant = self.sources.manager.storage.fs.redundant
        replicas = reported(a.leader, a.replicas, redundant=redundant)
        return max(1, len(replicas)), max(1, len(in_sync(replicas, cluster.view.brokers)))

    def _committed_rows(
        self, offsets: dict[tuple[str, int], tuple[int, int]]
    ) -> list[tuple[str, str, int, int, int, int]]:
        """(group, topic, partition, committed offset, commit ms, log end) of every
        committed partition of the groups this broker coordinates; each group's commits
        read before the log ends (module docstring)."""
        rows = []
        for group, committed in sorted(list(self.sources.offsets.offsets.items())):
            for (topic, p), c in sorted(dict(committed).items()):
                start_end = offsets.get((topic, p))
                if start_end is None:
                    start_end = self._offsets_of(topic, p)
                    if start_end is None:
                        continue
                    offsets[(topic, p)] = start_end
                rows.append((group, topic, p, c.offset, c.commit_ms, start_end[1]))
        return rows

    def sample_lag(self) -> None:
        """Feed the lag monitor (the broker's maintenance tick; a scrape does it too), at
        most once per sampling interval: reading the log ends is not free."""
        now_s = time.time()
        if now_s - self._sampled_at < self.lag.interval_s:
            return
        self._sampled_at = now_s
        seen = set()
        for group, topic, p, offset, commit_ms, end in self._committed_rows({}):
            self.lag.sample((group, topic, p), offset, commit_ms, end, now_s)
            seen.add((group, topic, p))
        self.lag.forget(seen)

    def _groups(
        self, offsets: dict[tuple[str, int], tuple[int, int]], now_s: float
    ) -> Iterator[Metric]:
        s = self.sources
        labels = ["consumergroup", "topic", "partition"]
        cur = _gauge(
            "kafka_consumergroup_current_offset",
            "Current Offset of a ConsumerGroup at Topic/Partition",
            labels,
        )
        cur_sum = _gauge(
            "kafka_consumergroup_current_offset_sum",
            "Current Offset of a ConsumerGroup at Topic for all partitions",
            ["consumergroup", "topic"],
        )
        lag = _gauge(
            "kafka_consumergroup_lag",
            "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
            labels,
        )
        lag_sum = _gauge(
            "kafka_consumergroup_lag_sum",
            "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
            ["consumergroup", "topic"],
        )
        members = _gauge(
            "kafka_consumergroup_members",
            "Amount of members in a consumer group",
            ["consumergroup"],
        )
        lag_s = _gauge(
            "sparklog_consumergroup_lag_seconds",
            "Age of the oldest record a ConsumerGroup has not consumed, at "
            "Topic/Partition (0 without lag)",
            labels,
        )
        status = _gauge(
            "sparklog_consumergroup_partition_status",
            "Burrow-style lag status of a ConsumerGroup at Topic/Partition (1 "
            "for the current status)",
            [*labels, "status"],
        )
        group_status = _gauge(
            "sparklog_consumergroup_status",
            "Burrow-style lag status of a ConsumerGroup: its worst "
            "partition's (1 for the current status)",
            ["consumergroup", "status"],
        )
        live = {gid: len(g.members) for gid, g in list(s.coordinator.groups.items())}
        by_group: dict[str, list[tuple[str, int, int, int, int]]] = {}
        for group, topic, p, offset, commit_ms, end in self._committed_rows(offsets):
            by_group.setdefault(group, []).append((topic, p, offset, commit_ms, end))
        for group, rows in sorted(by_group.items()):
            sums: dict[str, list[int]] = {}
            partition_status = []
            for topic, p, offset, commit_ms, end in rows:
                lp = [group, topic, str(p)]
                behind = max(end - offset, 0)
                cur.add_metric(lp, offset)
                lag.add_metric(lp, behind)
                totals = sums.setdefault(topic, [0, 0])
                totals[0] += offset
                totals[1] += behind
                lag_s.add_metric(lp, self._lag_seconds(topic, p, offset, behind, now_s))
                key = (group, topic, p)
                self.lag.sample(key, offset, commit_ms, end, now_s)
                st = self.lag.status(key, now_s)
                partition_status.append(st)
                for name in STATUSES:
                    status.add_metric([*lp, name], 1 if name == st else 0)
            for topic, (o, behind) in sorted(sums.items()):
                cur_sum.add_metric([group, topic], o)
                lag_sum.add_metric([group, topic], behind)
            members.add_metric([group], live.get(group, 0))
            g = worst(partition_status)
            for name in STATUSES:
                group_status.add_metric([group, name], 1 if name == g else 0)
        for gid, n in sorted(live.items()):
            if gid not in by_group and n:  # live members, nothing committed yet
                members.add_metric([gid], n)
        yield from (cur, cur_sum, lag, lag_sum, members, lag_s, status, group_status)

    def _lag_seconds(self, topic: str, p: int, offset: int, behind: int, now_s: float) -> float:
        """How old the first record not consumed is (0 without lag)."""
        if not behind:
            return 0.0
        try:
            ts = self._timestamp(self._view(topic, p), topic, p, max(offset, 0))
        except (SparkLogError, OSError):
            return 0.0
        return 0.0 if ts is None else max(now_s - ts / 1000, 0.0)

    def _offsets_of(self, topic: str, partition: int) -> tuple[int, int] | None:
        try:
            view = self._view(topic, partition)
        except (SparkLogError, OSError):
            return None
        return view.log_start_offset, view.high_watermark

    def _storage(self) -> Iterator[Metric]:
        s = self.sources
        labels = ["topic", "partition"]
        segments = _gauge("sparklog_partition_segments", "Live segments of a partition", labels)
        seg_bytes = _gauge(
            "sparklog_partition_bytes", "Bytes of a partition's live segments", labels
        )
        active = _gauge(
            "sparklog_partition_active_segment_bytes",
            "Bytes of a led partition's active segment",
            labels,
        )
        backlog = _gauge(
            "sparklog_partition_unsealed_segments",
            "Rolled segments of a partition waiting to be sealed to Parquet",
            labels,
        )
        for (topic, p), handle in sorted(list(s.manager.handles.items())):
            lp = [topic, str(p)]
            m = handle.log.manifest
            live = m.segments
            segments.add_metric(lp, len(live))
            act = handle.log.active_bytes
            seg_bytes.add_metric(lp, sum(x.size_bytes for x in live[:-1]) + act)
            active.add_metric(lp, act)
            backlog.add_metric(lp, sum(1 for x in live[:-1] if not x.sealed))
        yield from (segments, seg_bytes, active, backlog)
        bounds, count, total = durability.SYNC_TIMES.snapshot()
        doc = "Time of segment fsyncs (group commits and rolls)"
        fsync = HistogramMetricFamily("sparklog_fsync_duration_seconds", doc)
        buckets = [(str(b), c) for b, c in bounds] + [("+Inf", count)]
        fsync.add_metric([], buckets, total)
        yield fsync

    def _jobs(self) -> Iterator[Metric]:
        s = self.sources
        # not "job": Prometheus sets that to the scrape job, and renames a scraped one
        labels = ["topic", "sparklog_job"]
        last = _gauge(
            "sparklog_job_last_run_timestamp_seconds",
            "When the last retention or compaction run on a topic ended",
            labels,
        )
        took = _gauge(
            "sparklog_job_last_run_duration_seconds",
            "How long the last retention or compaction run on a topic took",
            labels,
        )
        removed = _gauge(
            "sparklog_job_last_run_removed",
            "What the last run on a topic removed (unit: segments, records, bytes)",
            [*labels, "unit"],
        )
        storage = s.manager.storage
        topics = {t for t, _, _ in self._partitions()}
        for topic in sorted(topics):
            for job in names.JOBS:
                run = jobruns.last(storage.fs, storage.root, topic, job)
                if run is None:
                    continue
                last.add_metric([topic, job], run.ended_ms / 1000)
                took.add_metric([topic, job], run.seconds)
                for unit, value in (
                    ("segments", run.segments_removed),
                    ("records", run.records_removed),
                    ("bytes", run.bytes_removed),
                ):
                    removed.add_metric([topic, job, unit], value)
        yield from (last, took, removed)
