"""The ``sparklog`` data source: ``spark.read`` / ``readStream`` / ``df.write`` /
``writeStream`` ``.format("sparklog")``."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from sparklog.datasource.batch import SparkLogBatchReader
from sparklog.datasource.options import batch_options, stream_options
from sparklog.datasource.scan import HEADERS_SCHEMA, KAFKA_SCHEMA
from sparklog.datasource.stream import SparkLogStreamReader
from sparklog.datasource.writer import SparkLogStreamWriter, SparkLogWriter, write_options
from sparklog.errors import OptionError


class SparkLogDataSource(DataSource):
    """Short name ``sparklog``; columns and options as Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def _include_headers(self) -> bool:
        opts = {k.lower(): str(v).lower() for k, v in self.options.items()}
        return opts.get("includeheaders") == "true"

    def schema(self) -> str:
        return KAFKA_SCHEMA + (HEADERS_SCHEMA if self._include_headers() else "")

    def reader(self, schema: Any) -> SparkLogBatchReader:
        return SparkLogBatchReader(batch_options(self.options))

    def streamReader(self, schema: Any) -> SparkLogStreamReader:
        return SparkLogStreamReader(stream_options(self.options))

    def writer(self, schema: Any, overwrite: bool) -> SparkLogWriter:
        if overwrite:
            raise OptionError(
                "a sparklog topic is an append-only log and cannot be overwritten: "
                'use mode("append")'
            )
        return SparkLogWriter(write_options(self.options, schema))

    def streamWriter(self, schema: Any, overwrite: bool) -> SparkLogStreamWriter:
        return SparkLogStreamWriter(write_options(self.options, schema))
