"""A sparklog stream's position committed to its consumer group: ``GroupOffsetCommitter``.

With the ``group`` and ``kafka.bootstrap.servers`` options, a stream commits the end of
every micro-batch Spark finished to the group, through the broker, as a standalone client
(generation -1, no member; ``sparklog.kafka.admin.commit_offsets``), so that
``sparklog groups describe`` and any Kafka client's ``committed()`` show the query's lag.
``GroupOffsetCommitter`` is the only writer of those offsets. Two places hear of a finished
micro-batch, in two processes, and each holds its own committer:

- the listener ``sparklog.spark.register`` adds to the session
  (``progress.GroupOffsetsListener``, in the driver's Python process), when Spark reports
  the batch done: its end offsets, from the query's progress. This keeps the lag current
  after every batch and after ``stop()``.
- the source (``stream.SparkLogStreamReader``, in the Python worker Spark runs it in), in
  ``latestOffset(start)`` and ``commit(end)``, which Spark calls only when it plans the next
  batch: they cover sessions without the listener (Spark Connect), and the last batch of an
  ``AvailableNow`` run.

The rules of ``commit``:

1. Only ends of micro-batches Spark finished are committed (a batch still running counts
   as lag). Each committer's commits only move forward; between the two committers a late
   progress event may commit an older end for a moment, until the listener hears of the
   next batch.
2. A position equal to the one this committer committed last is not sent again.
3. The source leaves out partitions it no longer sees (their topic was deleted): the broker
   cannot commit them.
4. A commit waits at most ``COMMIT_TIMEOUT_S``, and a failure is logged as a warning and
   never raised: the query's checkpoint is its source of truth, the group's offsets are a
   view of it for Kafka tools.

The listener learns a query's group from the source's report (``group_report``, under
``REPORT_KEY`` in the source's reported latest offset, which is what the query's progress
shows). The report carries no secret: a group on a secured broker (``security`` other
than PLAINTEXT) is committed with the settings remembered when the driver checked the
query's options in this process (``remember``, called from ``sparklog.datasource.driver``
at ``load``); without them the listener leaves the commits to the source.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sparklog.datasource.offsets import StreamOffsets
from sparklog.kafka import admin
from sparklog.kafka.client import ClientSettings, KafkaClient

log = logging.getLogger(__name__)

#: the key of the source's report in its reported latest offset (no topic name holds a ':')
REPORT_KEY = "sparklog:source"
#: a courtesy commit must not hold a micro-batch up for long
COMMIT_TIMEOUT_S = 10.0
#: the client id of the listener's commits when no settings were remembered
LISTENER_CLIENT_ID = "sparklog-source"
#: (bootstrap, group) -> the settings a query in this process gave (``remember``)
_SETTINGS: dict[tuple[str, str], ClientSettings] = {}


class GroupOffsetCommitter:
    """Commits a stream's position to ``group`` (see the module docstring for when).
    Remembers what it committed last; not thread-safe (each caller holds its own)."""

    def __init__(self, group: str, settings: ClientSettings) -> None:
        self.group = group
        self.settings = settings.with_timeout(COMMIT_TIMEOUT_S)
        self.committed: StreamOffsets | None = None

    def commit(self, end: StreamOffsets) -> bool:
        """Commit ``end`` unless it is what was committed last or empty; True if the
        group now holds it. A failure is logged, never raised."""
        if not end.positions or end == self.committed:
            return end == self.committed
        try:
            with KafkaClient(self.settings) as client:
                admin.commit_offsets(client, self.group, end.flat())
        except Exception as e:  # the checkpoint is the query's truth; lag is a courtesy
            log.warning(
                "sparklog: committing the offsets of group %s to %s failed: %s",
                self.group,
                self.settings.bootstrap,
                e,
            )
            return False
        self.committed = end
        return True


def remember(group: str, settings: ClientSettings) -> None:
    """The settings for the listener's commits to ``group`` (secured brokers' passwords
    stay out of the progress report)."""
    _SETTINGS[(settings.bootstrap, group)] = settings


def group_report(group: str, settings: ClientSettings) -> dict[str, str]:
    """What a source puts in its report for the listener (no secrets)."""
    return {
        "group": group,
        "bootstrap": settings.bootstrap,
        "security": settings.security_protocol,
    }


def listener_committer(report: Mapping[str, Any]) -> GroupOffsetCommitter | None:
    """The committer for the group a source's report names; None if the report names
    none, or names a secured broker this process has no settings for."""
    group, bootstrap = str(report.get("group") or ""), str(report.get("bootstrap") or "")
    if not group or not bootstrap:
        return None
    settings = _SETTINGS.get((bootstrap, group))
    if settings is None:
        if str(report.get("security", "PLAINTEXT")) != "PLAINTEXT":
            return None  # no credentials in this process: the source commits itself
        settings = ClientSettings(bootstrap, COMMIT_TIMEOUT_S, LISTENER_CLIENT_ID)
    return GroupOffsetCommitter(group, settings)
