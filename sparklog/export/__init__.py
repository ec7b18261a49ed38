"""Exports: a topic (a range of it, or incrementally what is new) to Parquet, Delta, Avro
or JSON, as a Spark job. ``options`` (the command line), ``source`` (what to read, and
how), ``sinks`` (how each format is written and what it guarantees), ``job`` (the run).
"""
