"""sparklog: Kafka's model (topics, partitions, offsets) with the log stored as Arrow/Parquet.

The package layout is the architecture (see docs/ARCHITECTURE.md):

- ``sparklog.storage``: the on-disk format, the partition log, durability, leases.
- ``sparklog.kafka``: the Kafka protocol pieces shared by the broker and the DataSource.
- ``sparklog.broker``: the Kafka-protocol broker.
- ``sparklog.datasource``: the PySpark DataSource ``format("sparklog")``.
- ``sparklog.compaction``: retention and compaction: planners, Spark steps, scheduler.
- ``sparklog.export``: exports to Parquet, Delta, Avro and JSON.
- ``sparklog.cli``, ``sparklog.demo`` (the demos, and the broker and etcd processes they start),
  ``sparklog.spark`` (``register``), ``sparklog.errors`` (every error).
"""

__version__ = "0.1.0"
