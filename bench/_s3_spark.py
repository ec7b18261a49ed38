"""Part 5 of ``bench/object_storage.py``: a Spark batch read of a topic's sealed Parquet
segments in the bucket, against readers of the same objects.

Readers, each timed over ``repeat`` runs after one warm-up run that also checks the row
count (medians): ``spark.read.format("sparklog").load("s3://...")`` into the ``noop``
sink; ``pyarrow.dataset`` over the same Parquet objects through the same S3 server
(Spark's own Parquet reader would need ``s3a://``: hadoop-aws and the AWS SDK bundle, a
few hundred MB the project's jars do not fetch); Spark's Parquet reader over a local copy
of the same objects into ``noop`` (what Spark's reader costs without the network). The
Spark session gets the S3 server's ``AWS_*`` variables in ``sc.environment`` before
``sparklog.spark.register``, as docs/object-storage.md says executors need them.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow.dataset as ds
from _spark import spark_session
from pyarrow import fs as pafs

import sparklog.spark


def read_sealed(
    env: dict[str, str], local: str, uri: str, topic: str, objects: list[str], n: int,
    repeat: int,
) -> list[tuple[str, float]]:  # fmt: skip
    """(reader, rows/s) for each reader; ``objects`` are the sealed segments' s3:// URIs,
    ``local`` an empty directory for their copy, ``n`` the rows they hold."""
    s3fs = pafs.S3FileSystem(
        access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env["AWS_REGION"], scheme="http",
        endpoint_override=env["AWS_ENDPOINT_URL"].removeprefix("http://"),
    )  # fmt: skip
    keys = [o.removeprefix("s3://") for o in objects]
    for i, k in enumerate(keys):
        pafs.copy_files(k, os.path.join(local, f"{i:05d}.parquet"), source_filesystem=s3fs)
    spark = spark_session("bench-object-storage")
    for k, v in env.items():
        spark.sparkContext.environment[k] = v
    sparklog.spark.register(spark)

    def frame(kind: str) -> Any:
        if kind == "sparklog":
            return spark.read.format("sparklog").option("subscribe", topic).load(uri)
        return spark.read.parquet(local)

    def spark_reader(kind: str) -> tuple[Callable[[], object], Callable[[], int]]:
        def run() -> None:
            frame(kind).write.format("noop").mode("overwrite").save()

        return run, lambda: int(frame(kind).count())

    def arrow() -> int:
        return int(ds.dataset(keys, filesystem=s3fs, format="parquet").to_table().num_rows)

    readers: dict[str, tuple[Callable[[], object], Callable[[], int]]] = {
        'Spark format("sparklog"), s3://': spark_reader("sparklog"),
        "pyarrow.dataset, same objects over S3": (arrow, arrow),
        "Spark parquet, local copy of the objects": spark_reader("parquet"),
    }
    out = []
    try:
        for name, (run, count) in readers.items():
            rows = count()  # warm-up, and the check
            if rows != n:
                raise AssertionError(f"{name} read {rows} rows, expected {n}")
            secs = []
            for _ in range(repeat):
                t = time.perf_counter()
                run()
                secs.append(time.perf_counter() - t)
            out.append((name, n / statistics.median(secs)))
            print(f"  {name:<42} {out[-1][1]:>12,.0f} rows/s", flush=True)
    finally:
        spark.stop()
    return out
