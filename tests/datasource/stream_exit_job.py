"""A user's streaming script that stops its query and exits without ``spark.stop()``:
``python stream_exit_job.py DATA_DIR``. Writes two records to topic ``t`` of DATA_DIR
(storage only, no broker), streams them with ``format("sparklog")`` into Spark's ``noop``
sink until a micro-batch is done, stops the query, prints ``stopped`` and exits."""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

import sparklog.spark
from sparklog.storage import Storage
from sparklog.storage.records import make_records


def main() -> int:
    root = sys.argv[1]
    storage = Storage(root)
    storage.topics.create("t", 1)
    log = storage.open_log("t", 0)
    log.append(make_records([b"a", b"b"]))
    log.close()
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("stream-exit-job")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    sparklog.spark.register(spark)
    q = (
        spark.readStream.format("sparklog")
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .load(root)
        .writeStream.format("noop")
        .option("checkpointLocation", f"{root}/checkpoint")
        .start()
    )
    deadline = time.monotonic() + 300
    while q.lastProgress is None and time.monotonic() < deadline:
        time.sleep(0.2)
    q.stop()
    print("stopped", flush=True)
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
