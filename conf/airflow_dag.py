"""Example Airflow DAG: sparklog retention and compaction through spark-submit.sh.

Copy it into your DAGs folder and edit ``SPARKLOG``, ``DATA_DIR``, ``TOPICS`` and
``SPARK_ARGS``. Per topic, retention runs before compaction (one job at a time per topic,
as ``sparklog scheduler`` does); topics run in parallel. Exit status 3 means "try again
later" (another compaction holds the topic, or a segment was swapped out meanwhile) and
Airflow's retries handle it; any failure leaves each partition with its old or its new
segment set. Not imported by sparklog's tests: Airflow is not one of its dependencies.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timedelta

from airflow import DAG

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
except ImportError:  # Airflow 2
    from airflow.operators.bash import BashOperator

SPARKLOG = "/opt/sparklog"  # the checkout holding spark-submit.sh
DATA_DIR = "/var/lib/sparklog"  # or hdfs://..., s3://...
TOPICS = ["orders", "clicks"]
SPARK_ARGS = ""  # e.g. "--master yarn --num-executors 8"


def job_command(job: str, topic: str) -> str:
    args = [*shlex.split(SPARK_ARGS), job, "--topic", topic, "--data-dir", DATA_DIR]
    return f"cd {shlex.quote(SPARKLOG)} && ./spark-submit.sh {shlex.join(args)}"


with DAG(
    dag_id="sparklog_retention_compaction",
    description="sparklog retention and compaction through spark-submit.sh",
    schedule=timedelta(minutes=10),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=1)},
    tags=["sparklog"],
) as dag:
    for topic in TOPICS:
        retention = BashOperator(
            task_id=f"retention_{topic}", bash_command=job_command("retention", topic)
        )
        compaction = BashOperator(
            task_id=f"compaction_{topic}", bash_command=job_command("compaction", topic)
        )
        retention >> compaction
