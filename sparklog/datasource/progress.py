"""``GroupOffsetsListener``: a stream's group offsets committed when Spark finishes a batch.

A Python source hears of a finished batch only when Spark plans the next one (``commit`` and
``latestOffset`` are called then, in the Python worker the source runs in), so a query's
group lag would run one micro-batch behind, and stay stale after the query stops.
``sparklog.spark.register`` therefore adds this listener to the session, once per session:
on every progress event of a query, for each sparklog source that names a group, it
commits the batch's end offsets through a ``GroupOffsetCommitter``
(``sparklog.datasource.group_offsets``, which states when commits happen and by whom).

Which sources are sparklog's: the listener hears every query of the session, and a
listener sees only the progress. A source is sparklog's when its description is a Python
data source's stream (``PYTHON_STREAM``) and its reported latest offset is a JSON object
carrying sparklog's report (``group_offsets.REPORT_KEY``, a key no topic name can be).
Only then are its end offsets read, and another Python source's latest offset is parsed
only if its text holds that key. Any other source (a file source reports no latest
offset, PySpark shows it as the string ``'None'``; a rate source a bare number; Spark's
Kafka source ``KafkaV2``; another Python data source) is left alone, silently, and its
offsets are never parsed. No callback raises: Spark logs a listener's exception with a JVM
stack trace.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from sparklog.datasource.group_offsets import REPORT_KEY, GroupOffsetCommitter, listener_committer
from sparklog.datasource.offsets import StreamOffsets

log = logging.getLogger(__name__)

#: what a Python data source's streaming reader is called in a query's progress
#: (``PythonMicroBatchStream@…``, ``PythonMicroBatchStreamWithTriggerAvailableNow@…``)
PYTHON_STREAM = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream"
#: what PySpark shows for a source offset that is not there
_NO_OFFSET = ("", "None", "null")


def is_python_source(description: str | None) -> bool:
    """Whether a progress report's source is a Python data source's stream (sparklog's
    among them)."""
    return str(description or "").startswith(PYTHON_STREAM)


def source_report(raw: str | None) -> dict[str, Any] | None:
    """The ``REPORT_KEY`` entry of a Python source's reported latest offset, None if it has
    none (or is not a JSON object at all). Text without the key is not parsed: another
    Python source's offsets are its own business."""
    if not raw or f'"{REPORT_KEY}"' not in raw:
        return None
    try:
        latest = json.loads(raw)
    except ValueError:
        return None
    info = latest.get(REPORT_KEY) if isinstance(latest, dict) else None
    return info if isinstance(info, dict) else None


def sparklog_report(source: Any) -> dict[str, Any] | None:
    """The report of a progress event's source if the source is sparklog's (see the
    module docstring), else None."""
    if not is_python_source(source.description):
        return None
    return source_report(source.latestOffset)


class GroupOffsetsListener(StreamingQueryListener):
    """See the module docstring. One committer per (query run, group)."""

    def __init__(self) -> None:
        self._committers: dict[tuple[str, str], GroupOffsetCommitter] = {}

    def onQueryStarted(self, event: Any) -> None:
        return None

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        try:
            run = str(event.runId)
            for key in [k for k in self._committers if k[0] == run]:
                del self._committers[key]
        except Exception as e:  # Spark would log a JVM stack trace for it
            log.debug("sparklog: forgetting a terminated query failed: %s", e)

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            run = str(progress.runId)
            found = [(s, sparklog_report(s)) for s in progress.sources]
        except Exception as e:
            log.debug("sparklog: reading a progress event failed: %s", e)
            return
        for source, report in found:
            if report is not None:
                try:
                    self._commit(run, report, source.endOffset)
                except Exception as e:  # never raise into Spark (see the module docstring)
                    log.warning(
                        "sparklog: the group offsets of query run %s were not committed: %s",
                        run,
                        e,
                    )

    def _commit(self, run: str, report: dict[str, Any], end: str | None) -> None:
        if str(end or "") in _NO_OFFSET:
            return  # no batch finished yet
        key = (run, str(report.get("group") or ""))
        committer = self._committers.get(key)
        if committer is None:
            committer = listener_committer(report)
            if committer is None:
                return
            self._committers[key] = committer
        committer.commit(StreamOffsets.parse(str(end)))
