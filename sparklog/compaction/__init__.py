"""Retention and compaction: pure planners, the Spark steps, the jobs and their scheduler.

``ls`` is the map: ``compactor`` (the Spark job: plan, find the last offset per key,
rewrite, commit), ``planner`` (which segments to delete, clean and regroup: pure, no Spark,
no I/O), ``retention`` (driver-only: one manifest commit per partition), ``rewrite`` (the
per-segment work inside Spark tasks: pyarrow only), ``scheduler`` (what ``sparklog
scheduler`` runs: the jobs through ``spark-submit.sh`` on intervals derived from topic
configs). Their command lines are ``sparklog.cli.jobs`` and ``sparklog.cli.scheduler``.

Every change is one manifest commit per partition through ``ManifestStore.commit``; the
jobs never delete files and never call the broker (it watches manifests). See
docs/compaction.md.
"""
