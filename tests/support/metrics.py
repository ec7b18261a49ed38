"""A broker's ``/metrics`` in tests (tests/broker, tests/cluster, tests/datasource): scrape
and look up series, the topics, records and commits the checks count, and the Grafana
dashboard in ``conf/``."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog_testkit.processes import BrokerProcess

CONF = Path(__file__).resolve().parents[2] / "conf"
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(b: BrokerProcess) -> Series:
    with urllib.request.urlopen(b.metrics_url, timeout=30) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(series: Series, name: str, **labels: Any) -> float | None:
    return series.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def create(b: BrokerProcess, topic: str, partitions: int = 1, **configs: str) -> str:
    with KafkaClient(b.bootstrap) as c:
        admin.create_topic(c, topic, partitions, configs)
    return topic


def produce(
    b: BrokerProcess, topic: str, counts: dict[int, int], *, one_by_one: bool = False,
    **extra: Any,
) -> None:  # fmt: skip
    """``counts[p]`` records into partition ``p`` of ``topic`` (a request each if
    ``one_by_one``)."""
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0 if one_by_one else 5})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i * 10, partition=partition, **extra)
            if one_by_one:
                p.flush(30)
    assert p.flush(30) == 0


def commit(b: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    with KafkaClient(b.bootstrap) as c:
        admin.commit_offsets(c, group, offsets)


#: served in cluster mode only
CLUSTER_ONLY = {"sparklog_leadership_changes_total", "sparklog_lease_renewals_total"}


def dashboard() -> dict[str, Any]:
    return json.loads((CONF / "grafana-dashboard.json").read_text())
