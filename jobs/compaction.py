"""spark-submit entry point: ``./spark-submit.sh compaction [--topic T ...] [--data-dir DIR]``.

Keeps the last record per key in the sealed segments of compacted topics, as a Spark job
(``sparklog.compaction.compactor``).
"""

from __future__ import annotations

import sys

from sparklog.cli.jobs import compaction_main

if __name__ == "__main__":
    sys.exit(compaction_main())
