"""spark-submit entry point of the embedded demo (``make demo``):
``./spark-submit.sh demo [--data-dir DIR] [--events N] [--keys K]``, and the cluster demo
``./spark-submit.sh demo --brokers 3 [--kills N]`` (brokers over one directory and etcd;
with ``--storage s3``, over a SeaweedFS bucket and etcd, each broker with its own cache).
The demo's directory is removed after a successful run unless ``--keep`` is given.

Its command line is ``sparklog.cli.demo``; the logic is ``sparklog.demo``: a broker on
loopback, Kafka producers, a streaming query with a consumer group, compaction, retention,
exports, all checked against a model.
"""

from __future__ import annotations

import sys

from sparklog.cli.demo import main

if __name__ == "__main__":
    sys.exit(main())
