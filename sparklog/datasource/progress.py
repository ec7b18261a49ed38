"""Group commits when Spark finishes a micro-batch (``GroupCommitListener``).

A Python source hears of a finished batch only when Spark plans the next one (``commit`` and
``latestOffset`` are called then), so a query's group lag would run one micro-batch behind,
and stay stale after the query stops. ``sparklog.spark.register`` therefore adds this
listener to the session: on every progress event of a query, for each sparklog source with
a ``group``, it commits the batch's end offsets to the group through the broker. The source
says which group and broker in its reported latest offset (``stream.REPORT_KEY``, shown in
the query's progress; no topic name holds a ':'), since a listener sees only the progress.

The report carries no secret: a group on a secured broker (``security`` other than
PLAINTEXT in the report) is committed with the settings ``remember``ed when the query's
options were checked in this process (``sparklog.datasource.driver``); without them the
listener leaves the commit to the source.

The source's own commits stay (they cover sessions without the listener, such as Spark
Connect); every commit is of offsets whose batch is done, so they only ever move forward.
A failed commit is logged; the query's checkpoint stays its source of truth.

The listener hears every query of the session. It reads only sources that are Python data
sources (``is_python_source``: their description names Spark's Python micro-batch stream)
whose latest offset is a JSON object carrying ``REPORT_KEY``; any other source (a file
source reports no latest offset, PySpark shows it as the string ``'None'``; a rate source a
bare number) is left alone, silently. No callback raises: Spark logs a listener's exception
with a JVM stack trace.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from sparklog.kafka import admin
from sparklog.kafka.client import ClientSettings, KafkaClient

log = logging.getLogger(__name__)

REPORT_KEY = "sparklog:source"
#: what a Python data source's streaming reader is called in a query's progress
#: (``PythonMicroBatchStream@…``, ``PythonMicroBatchStreamWithTriggerAvailableNow@…``)
PYTHON_STREAM = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream"
COMMIT_TIMEOUT_S = 10.0
#: (bootstrap, group) -> the settings a query in this process gave (``remember``)
_SETTINGS: dict[tuple[str, str], ClientSettings] = {}


def remember(group: str, settings: ClientSettings) -> None:
    """The settings for the listener's commits to ``group`` (secured brokers' passwords
    stay out of the progress report)."""
    _SETTINGS[(settings.bootstrap, group)] = settings.with_timeout(COMMIT_TIMEOUT_S)


def group_report(group: str, settings: ClientSettings) -> dict[str, str]:
    """What a source puts in its progress report for the listener (no secrets)."""
    return {"group": group, "bootstrap": settings.bootstrap,
            "security": settings.security_protocol}  # fmt: skip


def is_python_source(description: str | None) -> bool:
    """Whether a progress report's source is a Python data source's stream (sparklog's
    among them)."""
    return str(description or "").startswith(PYTHON_STREAM)


def source_report(raw: str | None) -> dict[str, Any] | None:
    """The ``REPORT_KEY`` entry of a source's reported latest offset, None if it has none
    (or is not a JSON object at all)."""
    try:
        latest = json.loads(raw) if raw else None
    except ValueError:
        return None
    info = latest.get(REPORT_KEY) if isinstance(latest, dict) else None
    return info if isinstance(info, dict) else None


def end_offsets(raw: str | None) -> dict[tuple[str, int], int]:
    """A source's offsets JSON as (topic, partition) -> offset (other keys left out)."""
    doc = json.loads(raw) if raw else {}
    return {
        (t, int(p)): int(o)
        for t, parts in doc.items()
        if ":" not in t and isinstance(parts, dict)
        for p, o in parts.items()
    }


class GroupCommitListener(StreamingQueryListener):
    """See the module docstring."""

    def __init__(self) -> None:
        self._committed: dict[tuple[str, str], dict[tuple[str, int], int]] = {}

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        try:
            run = str(event.runId)
            for key in [k for k in self._committed if k[0] == run]:
                del self._committed[key]
        except Exception as e:  # Spark would log a JVM stack trace for it
            log.debug("sparklog: forgetting a terminated query failed: %s", e)

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            sources = [s for s in progress.sources if is_python_source(s.description)]
            run = str(progress.runId)
        except Exception as e:
            log.debug("sparklog: reading a progress event failed: %s", e)
            return
        for source in sources:
            try:
                self._commit(run, source)
            except Exception as e:  # a courtesy: the checkpoint is the query's truth
                log.warning("sparklog: group commit after a micro-batch failed: %s", e)

    def _commit(self, run: str, source: Any) -> None:
        info = source_report(source.latestOffset)
        if info is None or not info.get("group") or not info.get("bootstrap"):
            return
        offsets = end_offsets(source.endOffset)
        key = (run, str(info["group"]))
        if not offsets or self._committed.get(key) == offsets:
            return
        settings = _SETTINGS.get((str(info["bootstrap"]), key[1]))
        if settings is None:
            if str(info.get("security", "PLAINTEXT")) != "PLAINTEXT":
                return  # no credentials in this process: the source commits itself
            settings = ClientSettings(str(info["bootstrap"]), COMMIT_TIMEOUT_S, "sparklog-source")
        with KafkaClient(settings) as client:
            admin.commit_offsets(client, key[1], offsets)
        self._committed[key] = offsets
