"""spark-submit entry point: ``./spark-submit.sh export --topic T --format F --out PATH ...``.

Exports a topic to Parquet, Delta, Avro or JSON (``sparklog.export``; its command line:
``sparklog.cli.export``).
"""

from __future__ import annotations

import sys

from sparklog.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
