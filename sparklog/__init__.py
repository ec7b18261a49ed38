"""sparklog: Kafka's model (topics, partitions, offsets) with the log stored as Arrow/Parquet.

The package layout is the architecture (see docs/ARCHITECTURE.md):

- ``sparklog.storage``: the on-disk format and the partition log.
- ``sparklog.broker``: the Kafka-protocol front (issue 3).
- ``sparklog.datasource``: the PySpark DataSource ``format("sparklog")`` (issue 5).
- ``sparklog.compaction``: retention and compaction planners and Spark steps (issue 6).
"""

__version__ = "0.1.0"
