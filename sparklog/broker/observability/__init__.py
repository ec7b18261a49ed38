"""What the broker reports about itself: ``metrics`` (what the hot paths count, and the
Prometheus ``/metrics`` endpoint), ``collector`` (what a scrape computes from the broker's
state) and ``lag`` (the consumer lag monitor and its health statuses). Nothing here changes
the broker's state; the collector is handed what it reads (see
``collector.MetricsSources``). See docs/metrics.md.
"""
