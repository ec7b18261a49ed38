"""Prometheus metrics of one broker: ``/metrics`` on ``--metrics HOST:PORT``.

Two kinds (docs/metrics.md has every name, its labels and its meaning):

- **kafka_exporter's names** (``kafka_brokers``, ``kafka_topic_partition_current_offset``,
  ``kafka_consumergroup_lag`` ...), with its labels (``topic``, ``partition``,
  ``consumergroup``), so that dashboards and lag alerts written for kafka_exporter work
  unchanged. They are computed when scraped, from the broker's own state:
  ``BrokerCollector`` (``sparklog.broker.observability.collector``).
- **sparklog's** (``sparklog_*``): what only sparklog knows. There are counters and
  histograms the hot paths feed, and gauges computed when scraped:
  - the request counts and latency per API, produce and fetch records and bytes per
    topic, fsync latency (``BrokerMetrics``);
  - lag in seconds, Burrow-style lag status (``sparklog.broker.observability.lag``), segments and
    active-segment bytes, the sealing backlog, the last retention and compaction run per
    topic (``sparklog.storage.jobruns``), leadership changes and lease renewals.

**Which series a broker reports.** In embedded mode, everything. In cluster mode, each
broker reports the partitions it leads and the groups it coordinates (whose
``__consumer_offsets`` partition it leads). Across the brokers these series are disjoint,
so ``sum`` or ``max`` over the cluster gives each one once, as kafka_exporter's single
view would. ``kafka_brokers`` and ``kafka_broker_info`` are cluster-wide on every broker.

**Consistency.** A partition's committed offset is read before its log end, so lag is
never negative (and is clamped at zero besides: an offset may be committed past the end).
A partition of a group without a committed offset has no lag series, rather than -1. A
group without live members keeps its series, with ``kafka_consumergroup_members`` 0.

**Cost.** The hot paths pay one histogram observation and a few counter increments per
request: label children are looked up once and cached, nothing is counted per record. A
scrape runs on a worker thread (``MetricsServer``), so it does not hold up the event
loop. It reads in-memory state, a snapshot taken with single C-level copies. For
partitions this broker has not opened, it reads the manifest and high-watermark files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
)
from prometheus_client import generate_latest as _generate

log = logging.getLogger(__name__)
# no ``*_created`` series: dashboards and kafka_exporter have none, and they double the text
disable_created_metrics()  # type: ignore[no-untyped-call]

#: request latency buckets (seconds): an fsync-bound produce is milliseconds, a fetch
#: long-poll up to its max wait
REQUEST_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class BrokerMetrics:
    """The counters and histograms the broker's hot paths feed (module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self._requests = Histogram(
            "sparklog_request_duration_seconds",
            "Time to answer a request, per Kafka API",
            ["api"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self._request_bytes = Counter(
            "sparklog_request_bytes",
            "Bytes of requests received, per Kafka API",
            ["api"],
            registry=r,
        )
        self._response_bytes = Counter(
            "sparklog_response_bytes",
            "Bytes of responses sent, per Kafka API",
            ["api"],
            registry=r,
        )
        self._produced_records = Counter(
            "sparklog_produce_records", "Records appended by Produce", ["topic"], registry=r
        )
        self._produced_bytes = Counter(
            "sparklog_produce_bytes",
            "Record-batch bytes appended by Produce",
            ["topic"],
            registry=r,
        )
        self._fetched_records = Counter(
            "sparklog_fetch_records", "Records returned by Fetch", ["topic"], registry=r
        )
        self._fetched_bytes = Counter(
            "sparklog_fetch_bytes",
            "Record-batch bytes returned by Fetch",
            ["topic"],
            registry=r,
        )
        self._api: dict[str, tuple[Any, Any, Any]] = {}
        self._topic: dict[str, tuple[Any, Any, Any, Any]] = {}
        #: where the broker serves ``/metrics``, once it does (DescribeConfigs of the broker
        #: reports it as ``sparklog.metrics.url``: ``sparklog groups describe`` reads the
        #: lag status there)
        self.url: str | None = None

    def request(self, api: str, seconds: float, request_bytes: int, response_bytes: int) -> None:
        children = self._api.get(api)
        if children is None:
            children = self._api[api] = (
                self._requests.labels(api),
                self._request_bytes.labels(api),
                self._response_bytes.labels(api),
            )
        children[0].observe(seconds)
        children[1].inc(request_bytes)
        children[2].inc(response_bytes)

    def _topic_children(self, topic: str) -> tuple[Any, Any, Any, Any]:
        children = self._topic.get(topic)
        if children is None:
            children = self._topic[topic] = (
                self._produced_records.labels(topic),
                self._produced_bytes.labels(topic),
                self._fetched_records.labels(topic),
                self._fetched_bytes.labels(topic),
            )
        return children

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        c = self._topic_children(topic)
        c[0].inc(records)
        c[1].inc(nbytes)

    def fetched(self, topic: str, records: int, nbytes: int) -> None:
        c = self._topic_children(topic)
        c[2].inc(records)
        c[3].inc(nbytes)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series end."""
        if self._topic.pop(topic, None) is not None:
            for metric in (
                self._produced_records,
                self._produced_bytes,
                self._fetched_records,
                self._fetched_bytes,
            ):
                with contextlib.suppress(KeyError):
                    metric.remove(topic)


def render(metrics: BrokerMetrics) -> bytes:
    """The text exposition of everything ``metrics`` holds."""
    return bytes(_generate(metrics.registry))


class MetricsServer:
    """``GET /metrics`` on the broker's event loop; the scrape itself on a worker thread."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics
        self._runner: web.AppRunner | None = None
        self.address: tuple[str, int] = ("", 0)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        app = web.Application()
        app.router.add_get("/metrics", self._scrape)
        app.router.add_get("/", self._root)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=64)
        await site.start()
        sock = self._runner.addresses[0]
        self.address = (str(sock[0]), int(sock[1]))
        return self.address

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _root(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="sparklog broker: metrics at /metrics\n")

    async def _scrape(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        try:
            body = await loop.run_in_executor(None, render, self.metrics)
        except Exception:
            log.exception("a /metrics scrape failed")
            return web.Response(status=500, text="scrape failed; see the broker's log\n")
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
