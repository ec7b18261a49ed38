"""Where the project's JVM jars are, for the Spark sessions and Kafka processes it starts.

``scripts/jars.py`` (run by ``make setup``) fetches them with Maven into ``.jars/<name>/``
of the checkout (``jvm/<name>/pom.xml`` says what and why); ``SPARKLOG_JARS`` points
elsewhere. ``spark``: Spark's Kafka connector and delta-spark, without what pyspark ships;
``kafka``: Apache Kafka 4.3.1 (broker, tools, Java clients) with ``slf4j-simple``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sparklog.errors import JarsMissingError as JarsMissingError  # its old home: re-exported

CHECKOUT = Path(__file__).resolve().parents[1]


def jar_dir(name: str) -> Path:
    base = os.environ.get("SPARKLOG_JARS")
    return (Path(base) if base else CHECKOUT / ".jars") / name


def jars(name: str) -> list[str]:
    """The jars of ``name`` (``spark`` or ``kafka``), sorted; JarsMissingError if none."""
    found = sorted(str(p) for p in jar_dir(name).glob("*.jar"))
    if not found:
        raise JarsMissingError(
            f"no {name} jars in {jar_dir(name)}: run `make setup` (or `python scripts/jars.py "
            f"{name}`; it needs java and mvn)"
        )
    return found


def spark_jars_conf() -> str:
    """The value of ``spark.jars`` for Spark's Kafka connector and delta-spark, "" if the
    jars are not fetched (a session without them still runs sparklog's own source)."""
    try:
        return ",".join(jars("spark"))
    except JarsMissingError:
        return ""


#: What a session needs for delta-spark's SQL and ``DeltaTable.merge``: its extension and
#: its catalog (both static: they must be set when the session is built), and a snapshot
#: state of 2 partitions instead of 50 (tables written by one export are small; a local[2]
#: session spends more on 50 tasks than on the state).
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",
}


def spark_session_conf() -> dict[str, str]:
    """The conf a SparkSession the project builds gets for its JVM jars: ``spark.jars`` and
    delta-spark's :data:`DELTA_CONF`; empty when the jars are not fetched (such a session
    runs sparklog's own source and file exports; Delta and Spark's Kafka connector need
    the jars). ``./spark-submit.sh`` passes the same."""
    extra = spark_jars_conf()
    return {"spark.jars": extra, **DELTA_CONF} if extra else {}


def kafka_classpath() -> str:
    return os.pathsep.join(jars("kafka"))


def spark_submit_args() -> list[str]:
    """``spark_session_conf()`` as spark-submit options (``--jars`` and ``--conf``s)."""
    conf = spark_session_conf()
    args = ["--jars", conf.pop("spark.jars")] if conf else []
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args


if __name__ == "__main__":  # ./spark-submit.sh: one option per line
    print("\n".join(spark_submit_args()))


def has_jvm_class(spark: Any, name: str) -> bool:
    """Whether the session's JVM can load class ``name`` (so whether an optional Spark
    package, such as spark-avro or delta-spark, is on its classpath). Through Spark's own
    class loading: jars of ``spark.jars`` are on the context class loader, which
    ``Class.forName`` from py4j does not consult."""
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.apache.spark.util.Utils.classForName(name, True, False)
        return True
    except Exception:
        return False
