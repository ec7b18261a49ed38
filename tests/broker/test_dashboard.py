"""The Grafana dashboard and the alert rules in ``conf/`` query only metrics a live broker
serves: every metric name in their PromQL is in a real broker's ``/metrics`` after a
produce, a consume, a commit and a retention run (cluster-only ones are checked by
``tests/cluster/test_metrics.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparklog_testkit.processes import BrokerProcess
from tests.support.metrics import CLUSTER_ONLY, commit, create, dashboard, produce, scrape

CONF = Path(__file__).resolve().parents[2] / "conf"
NAME = re.compile(r"\b(?:kafka|sparklog)_[a-z0-9_]+")
#: what in PromQL names labels, not metrics (``{sparklog_job="retention"}``, ``by (topic)``)
LABELS = re.compile(r"\{[^}]*\}|\b(?:by|on|without|ignoring)\s*\([^)]*\)")


def queried() -> set[str]:
    """Every metric name the dashboard's targets and the alert rules query."""
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]
    alerts = (CONF / "sparklog-alerts.yml").read_text().splitlines()
    exprs += [line.split("expr:", 1)[1] for line in alerts if "expr:" in line]
    return {m for e in exprs for m in NAME.findall(LABELS.sub("", e))}


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    d = dashboard()
    panels = d["panels"]
    assert d["uid"] and d["title"] and panels
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        if p["type"] == "row":
            continue
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]), p["title"]
        assert p["datasource"]["type"] == "prometheus"
        assert (
            set(p["gridPos"]) == {"h", "w", "x", "y"}
            and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        )


def test_every_metric_the_dashboard_and_alerts_query_is_served(tmp_path: Path) -> None:
    from sparklog.compaction.retention import apply_retention

    b = BrokerProcess(str(tmp_path / "data"), metrics=True).start()
    try:
        topic = create(b, "dash", **{"segment.bytes": "2000", "retention.bytes": "3000"})
        produce(b, topic, {0: 60}, one_by_one=True)
        commit(b, "dash-group", {(topic, 0): 10})
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "dash-reader",
                      "auto.offset.reset": "earliest"})  # fmt: skip
        c.subscribe([topic])
        while c.poll(1.0) is None:
            pass
        c.close()
        apply_retention(b.data_dir, [topic])
        served = {name for name, _ in scrape(b)}
    finally:
        b.stop()
    wanted = queried() - CLUSTER_ONLY
    assert len(wanted) > 20
    missing = sorted(wanted - served)
    assert not missing, f"the dashboard or alerts query metrics no broker serves: {missing}"


@pytest.mark.parametrize("name", sorted(CLUSTER_ONLY))
def test_cluster_only_metrics_are_in_the_dashboard(name: str) -> None:
    assert name in queried()
