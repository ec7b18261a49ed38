"""Exports: a topic (a range of it, or incrementally what is new) to Parquet, Delta, Avro
or JSON, as a Spark job. ``options`` (what an export does, checked when made), ``source``
(what to read, and how), ``sinks`` (how each format is written and what it guarantees),
``avro`` (Avro decoding without spark-avro), ``job`` (the run). The command line is
``sparklog.cli.export``.
"""
