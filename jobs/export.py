"""spark-submit entry point: ``./spark-submit.sh export --topic T --format F --out PATH ...``.

Exports a topic to Parquet, Delta, Avro or JSON (``sparklog.export``; options in
``sparklog/export/options.py``).
"""

from __future__ import annotations

import sys

from sparklog.export.job import main

if __name__ == "__main__":
    sys.exit(main())
