"""The ``sparklog`` data source: ``spark.read`` / ``readStream`` / ``df.write`` /
``writeStream`` ``.format("sparklog")``.

Typed keys and values (``valueFormat``/``keyFormat`` avro or json): ``schema()`` resolves
the reader schemas (a subject's version, or its latest now) and returns the typed columns;
PySpark pickles this instance after ``schema()`` and builds the readers from the pickle,
so the readers decode to exactly the schema Spark was given.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from sparklog.datasource.batch import SparkLogBatchReader
from sparklog.datasource.options.reads import batch_options, read_schema_options, stream_options
from sparklog.datasource.options.writes import write_options
from sparklog.datasource.scan import HEADERS_SCHEMA, KAFKA_SCHEMA, decoding_for
from sparklog.datasource.stream import SparkLogStreamReader
from sparklog.datasource.writer import SparkLogStreamWriter, SparkLogWriter
from sparklog.errors import OptionError
from sparklog.schemas.codec import Decoding


class SparkLogDataSource(DataSource):
    """Short name ``sparklog``; columns and options as Spark's Kafka source."""

    _decoding: Decoding | None = None

    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def _include_headers(self) -> bool:
        opts = {k.lower(): str(v).lower() for k, v in self.options.items()}
        return opts.get("includeheaders") == "true"

    def _resolved(self) -> Decoding | None:
        """The reader schemas, resolved once (in ``schema()``, before pickling)."""
        if self._decoding is None:
            schemas = read_schema_options(self.options)
            if schemas is not None:
                self._decoding = decoding_for(schemas, str(self.options["path"]))
        return self._decoding

    def schema(self) -> str | StructType:
        decoding = self._resolved()
        if decoding is None:
            return KAFKA_SCHEMA + (HEADERS_SCHEMA if self._include_headers() else "")
        from sparklog.schemas.spark import read_schema

        return read_schema(self._include_headers(), decoding)

    def reader(self, schema: Any) -> SparkLogBatchReader:
        return SparkLogBatchReader(batch_options(self.options), self._resolved())

    def streamReader(self, schema: Any) -> SparkLogStreamReader:
        return SparkLogStreamReader(stream_options(self.options), self._resolved())

    def writer(self, schema: Any, overwrite: bool) -> SparkLogWriter:
        if overwrite:
            raise OptionError(
                "a sparklog topic is an append-only log and cannot be overwritten: "
                'use mode("append")'
            )
        return SparkLogWriter(write_options(self.options, schema))

    def streamWriter(self, schema: Any, overwrite: bool) -> SparkLogStreamWriter:
        return SparkLogStreamWriter(write_options(self.options, schema))
