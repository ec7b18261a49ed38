"""What the broker reports about itself: ``metrics`` (the Prometheus ``/metrics`` endpoint
and the collector that reads the broker's state on each scrape) and ``lag`` (the consumer
lag monitor and its health statuses). Nothing here changes the broker's state; the
collector is handed what it reads (see ``metrics.MetricsSources``). See docs/metrics.md.
"""
