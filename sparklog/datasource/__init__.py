"""The PySpark Python DataSource ``format("sparklog")``: batch and streaming reader, writer.

``ls`` is the map: ``source`` (the ``DataSource``), ``options`` (every option, validated in
one place), ``plan`` (the read planner of batch and stream reads, driver side), ``scan``
(what a read task does, in executors), ``batch`` and ``stream`` (the two readers),
``offsets`` (a stream's position and its one nested/flat conversion), ``group_offsets``
(the one committer of a stream's consumer-group offsets), ``progress`` (the listener that
commits them as micro-batches end), ``writer``, ``producer`` and ``sink_state`` (the sink),
``driver`` (option checks in the driver), ``register`` (what ``sparklog.spark.register``
calls). Reads go straight to storage; writes go through the broker, over
``sparklog.kafka``. Never imports ``sparklog.broker``.

PySpark is an extra (``pip install 'sparklog[spark]'``): importing this package without it,
or with a PySpark older than ``MIN_SPARK``, raises ``SparkMissingError`` saying so. Spark
4.1 gives Python data sources filter push-down and the Arrow stream writer, which the batch
reader and the sink use; Spark 4.2 adds admission control (``latestOffset(start, limit)``,
``getDefaultReadLimit``, ``reportLatestOffset``, ``Trigger.AvailableNow`` of the source's
own), which ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and the group-offsets
listener need (``ADMISSION_CONTROL``; docs/jvm.md, "Which Spark").
"""

from __future__ import annotations

import re

from sparklog.errors import SparkMissingError

#: the oldest Spark whose Python DataSource API has what the source uses
MIN_SPARK = (4, 1)

try:
    import pyspark
except ModuleNotFoundError as e:  # the broker and CLI run without it; this package cannot
    raise SparkMissingError(
        f"format('sparklog') and sparklog's Spark jobs need PySpark {MIN_SPARK[0]}."
        f"{MIN_SPARK[1]} or newer ({e}): pip install 'sparklog[spark]' (or run where "
        "Spark's own pyspark is importable)"
    ) from e


def spark_version(text: str) -> tuple[int, int]:
    """``"4.2.0"`` as ``(4, 2)``."""
    major, minor = [*(int(n) for n in re.findall(r"\d+", text)[:2]), 0, 0][:2]
    return major, minor


SPARK_VERSION = spark_version(pyspark.__version__)
if SPARK_VERSION < MIN_SPARK:
    raise SparkMissingError(
        f"format('sparklog') needs PySpark {MIN_SPARK[0]}.{MIN_SPARK[1]} or newer (the Python "
        f"DataSource API's filter push-down and Arrow stream writer); found "
        f"{pyspark.__version__} at {pyspark.__file__}"
    )
#: Spark 4.2's admission control for Python streaming sources (see the module docstring)
ADMISSION_CONTROL = SPARK_VERSION >= (4, 2)
