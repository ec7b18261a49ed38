"""Retention and compaction: pure planners, the Spark steps, the jobs and their scheduler.

``ls`` is the map: ``planner`` (which segments to delete, clean and regroup: pure, no Spark,
no I/O), ``retention`` (driver-only: one manifest commit per partition), ``rewrite`` (the
per-segment work inside Spark tasks: pyarrow only), ``compactor`` (the Spark job: plan,
find the last offset per key, rewrite, commit), ``jobs`` (the command lines behind
``jobs/retention.py`` and ``jobs/compaction.py``), ``scheduler`` (``sparklog scheduler``:
runs the jobs through ``spark-submit.sh`` on intervals derived from topic configs).

Every change is one manifest commit per partition through ``ManifestStore.commit``; the
jobs never delete files and never call the broker (it watches manifests). See
docs/compaction.md.
"""
