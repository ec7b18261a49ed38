"""Where the project's JVM jars are, for the Spark sessions and Kafka processes it starts.

``scripts/jars.py`` (run by ``make setup``) fetches them with Maven into ``.jars/<name>/``
of the checkout (``jvm/<name>/pom.xml`` says what and why); ``SPARKLOG_JARS`` points
elsewhere. ``spark``: Spark's Kafka connector and delta-spark, without what pyspark ships;
``kafka``: Apache Kafka 4.3.1 (broker, tools, Java clients) with ``slf4j-simple``.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


class JarsMissingError(RuntimeError):
    """The jars of a purpose are not fetched: the message says how to fetch them."""


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


def kafka_classpath() -> str:
    return os.pathsep.join(jars("kafka"))
