"""A streaming query copying topic ``in`` to topic ``out`` through format("sparklog"):
``python sink_job.py DATA_DIR BOOTSTRAP CHECKPOINT [TRANSACTIONAL_ID]`` (with the last,
the sink writes transactionally). Run as a child by the exactly-once
tests, with ``SPARKLOG_CRASH_AT`` set to kill its write tasks at a crash point. Exit code 0
when the query drained the backlog (AvailableNow), 1 when it failed."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

import sparklog.spark


def main() -> int:
    data_dir, bootstrap, checkpoint = sys.argv[1:4]
    extra = {"kafka.transactional.id": sys.argv[4]} if len(sys.argv) > 4 else {}
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sink-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sparklog.spark.register(spark)
    q = (
        spark.readStream.format("sparklog")
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .option("includeHeaders", "true")
        .load(data_dir)
        .selectExpr("key", "value", "headers")
        .writeStream.format("sparklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "out")
        .option("kafka.batch.size", "256")  # many small batches: a crash leaves a prefix
        .option("checkpointLocation", checkpoint)
        .options(**extra)
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination()
    except Exception as e:
        print(f"sink-job: query failed: {str(e)[:300]}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
