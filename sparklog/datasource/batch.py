"""``spark.read.format("sparklog")``: a batch read of offset ranges, straight from storage.

The driver plans with ``sparklog.datasource.plan``: the subscription and every partition's
bounds from the manifests and high watermarks, narrowed by the starting and ending options
and by pushed filters, split into tasks of at most ``maxRecordsPerPartition`` offsets.
Executors read them (``sparklog.datasource.scan``); only plain data crosses the boundary.
Typed keys and values: every range carries the query's ``Decoding`` (its reader schemas,
resolved on the driver; ``sparklog.datasource.source``). With ``kafka.bootstrap.servers``,
the driver first asks the broker whether the configured
principal may READ every topic it planned (executors read files, which no broker guards).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from sparklog.datasource.options.reads import BatchOptions
from sparklog.datasource.plan import Pushed, ReadPlanner
from sparklog.datasource.scan import OffsetRange, read_partition, with_decoding
from sparklog.kafka.security_admin import require_read_access
from sparklog.schemas.codec import Decoding


class SparkLogBatchReader(DataSourceReader):
    def __init__(self, options: BatchOptions, decoding: Decoding | None = None) -> None:
        self.options = options
        self.decoding = decoding
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
        ranges = self._plan.split({tp: (start, end) for tp, (start, end, _) in spans.items()})
        return with_decoding(ranges, self.decoding)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
