"""spark-submit entry point: ``./spark-submit.sh retention [--topic T ...] [--data-dir DIR]``.

Deletes whole rolled segments (sealed or not) past retention.ms / retention.bytes and
advances the log start offset (``sparklog.compaction.retention``); driver-only, it starts
no SparkSession.
"""

from __future__ import annotations

import sys

from sparklog.cli.jobs import retention_main

if __name__ == "__main__":
    sys.exit(retention_main())
