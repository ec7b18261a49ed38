"""``spark.read.format("sparklog")``: a batch read of offset ranges, straight from storage.

The driver plans with ``sparklog.datasource.plan``: the subscription and every partition's
bounds from the manifests and high watermarks, narrowed by the starting and ending options
and by pushed filters, split into tasks of at most ``maxRecordsPerPartition`` offsets.
Executors read them (``sparklog.datasource.scan``); only plain data crosses the boundary.
With ``kafka.bootstrap.servers``, the driver first asks the broker whether the configured
principal may READ every topic it planned (executors read files, which no broker guards).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from sparklog.datasource.options import BatchOptions
from sparklog.datasource.plan import Pushed, ReadPlanner
from sparklog.datasource.scan import OffsetRange, read_partition
from sparklog.kafka.security_admin import require_read_access


class SparkLogBatchReader(DataSourceReader):
    def __init__(self, options: BatchOptions) -> None:
        self.options = options
        self.pushed = Pushed()
        self._plan = ReadPlanner.of(options)

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Narrow the scan with filters on partition, offset and timestamp (served from the
        manifest and the time index); Spark still evaluates every filter on what is read."""
        for f in filters:
            self.pushed.add(f)
        return filters

    def partitions(self) -> list[OffsetRange]:
        spans = self._plan.batch_spans(self.options, self.pushed)
        if self.options.client is not None:
            require_read_access(self.options.client, sorted({t for t, _ in spans}))
        return self._plan.split({tp: (start, end) for tp, (start, end, _) in spans.items()})

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
