"""PySpark Python DataSource ``format("sparklog")``: batch and streaming reader, writer.

Reads segments straight from storage in executors; writes go through the broker.
Built by the DataSource issue; this package is intentionally empty until then.
"""
