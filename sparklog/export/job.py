"""The export run (``sparklog.cli.export`` is its command line).

Prints a line per partition as it is planned (offsets, and how many lie in sealed
segments read by Spark's Parquet reader), a line every 10 s of how far the write's Spark
stages are (``sparklog.spark_jobs.reporting_progress``), and a line per micro-batch of an
incremental run; ``ExportResult.summary`` is the last line.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.datasource.offsets import StreamOffsets
from sparklog.export import sinks, source
from sparklog.export.options import ExportOptions
from sparklog.spark_jobs import reporting_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ExportResult:
    """What an export did: ``rows`` written (None where counting would cost a pass),
    ``records`` read (offsets in range minus compaction's gaps; None when not counted),
    the ``offsets`` its ranges spanned, micro-batches, time, and the Delta version."""

    rows: int | None
    offsets: int
    batches: int
    seconds: float
    version: int | None = None
    records: int | None = None

    def summary(self, opts: ExportOptions) -> str:
        read = (
            f"{self.records:,} records read"
            if self.records is not None
            else f"{self.offsets:,} offsets read"
        )
        written = f"{self.rows:,} rows written" if self.rows is not None else "written"
        if opts.upsert and self.rows is not None:
            written += " (upsert: merged by key)"
        batches = f" in {self.batches} micro-batches" if opts.incremental else ""
        version = f", table version {self.version}" if self.version is not None else ""
        return (
            f"export: done in {self.seconds:.1f} s: {read}{batches}, {written}: "
            f"{opts.topic} to {opts.format} at {opts.out}{version}"
        )


def say(line: str) -> None:
    print(line, flush=True)


def export(spark: SparkSession, opts: ExportOptions, progress: sinks.Say = say) -> ExportResult:
    """Run one export (see ``sparklog.export.sinks`` for what each format guarantees)."""
    scratch: list[str] = []
    try:
        return _export(spark, opts, progress, scratch)
    finally:
        for path in scratch:
            shutil.rmtree(path, ignore_errors=True)


def _export(
    spark: SparkSession, opts: ExportOptions, progress: sinks.Say, scratch: list[str]
) -> ExportResult:
    t0 = time.monotonic()
    opts = source.pin_reader_schema(opts)
    if opts.incremental:
        return _incremental(spark, opts, progress, t0, scratch)
    ranges = source.plan(opts)
    for r in ranges:
        if r.count > 0:
            sealed = r.sealed_end - r.start if opts.reader == "native" else 0
            progress(
                f"export {r.topic}-{r.partition}: offsets {r.start}..{r.end - 1} "
                f"({r.count:,} offsets; {sealed:,} from {len(r.files)} sealed segments "
                f"through Spark's Parquet reader)"
            )
        else:
            progress(f"export {r.topic}-{r.partition}: nothing in range")
    df = source.read(spark, opts, ranges)
    with reporting_progress(spark, progress, f"export {opts.topic}"):
        written = sinks.write_once(
            spark, df, opts, lambda d: source.decode(spark, d, opts, scratch)
        )
    offsets = sum(max(r.count, 0) for r in ranges)
    return ExportResult(written.rows, offsets, 1, time.monotonic() - t0, written.version)


def _incremental(
    spark: SparkSession, opts: ExportOptions, progress: sinks.Say, t0: float, scratch: list[str]
) -> ExportResult:
    from sparklog.datasource.register import register

    register(spark)
    assert opts.checkpoint is not None
    reader = spark.readStream.format("sparklog")
    for k, v in opts.source_options().items():
        reader = reader.option(k, v)
    stream = reader.load(opts.data_dir)
    written: list[int] = []  # rows each micro-batch committed (delta)
    if opts.format == "delta":
        fn = sinks.foreach_batch_delta(
            spark, opts, lambda d: source.decode(spark, d, opts, scratch), progress, written
        )
        writer = stream.writeStream.foreachBatch(fn)
    else:
        writer = (
            source.decode(spark, stream, opts)
            .writeStream.format(sinks.file_format(opts.format))
            .option("path", opts.out)
        )
    q = writer.option("checkpointLocation", opts.checkpoint).trigger(availableNow=True).start()
    seen, rows, offsets = 0, 0, 0
    while True:
        finished = q.awaitTermination(1)
        for p in q.recentProgress[seen:]:
            seen += 1
            n = int(p["numInputRows"])
            if not n:
                continue
            rows += n
            src = p["sources"][0]
            start, end = _offsets(src.get("startOffset")), _offsets(src.get("endOffset"))
            offsets += sum(e - start[k] for k, e in end.items() if k in start)
            span = ", ".join(
                f"{opts.topic}-{k} {start[k]}..{e - 1}"
                if k in start
                else f"{opts.topic}-{k} up to {e - 1}"
                for k, e in sorted(end.items())
                if k not in start or e > start[k]
            )
            progress(f"export: micro-batch {p['batchId']}: {n:,} records ({span})")
        if finished:
            break
    if q.exception() is not None:
        raise q.exception()  # type: ignore[misc]
    rows_written = sum(written) if opts.format == "delta" else rows
    batches = sum(1 for p in q.recentProgress if int(p["numInputRows"]))
    return ExportResult(
        rows_written, max(offsets, rows), batches, time.monotonic() - t0, records=rows
    )


def _offsets(raw: Any) -> dict[int, int]:
    """One topic's partition -> offset from a progress report's offsets JSON."""
    doc = json.loads(raw) if isinstance(raw, str) else raw
    if not doc:
        return {}
    return {p: o for (_, p), o in StreamOffsets.from_spark(doc).positions.items()}
