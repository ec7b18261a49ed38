"""The shipped Prometheus files (``conf/prometheus.yml``, ``conf/sparklog-alerts.yml``) and
Grafana dashboard against a real Prometheus (Debian's ``prometheus``, which ships
``promtool``; ``scripts/setup.sh`` installs it) scraping a real broker.

The label sets the rules see are the ones Prometheus stores after scraping with the
shipped scrape config (its ``job`` and ``instance`` target labels, ``honor_labels``
false), read back from its API: so a label of ``/metrics`` that clashes with a target
label (Prometheus renames it ``exported_<name>``) or drifts from what the rules and the
dashboard query fails here. ``promtool test rules`` then plays those series over a day
to check when the alerts fire."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparklog_testkit.processes import BrokerProcess, die_with_parent
from tests.support.metrics import CLUSTER_ONLY, commit, create, dashboard, produce

CONF = Path(__file__).resolve().parents[2] / "conf"
ALERTS = CONF / "sparklog-alerts.yml"
#: kafka_exporter's names, kept for its dashboards, that promtool's lint dislikes
KAFKA_EXPORTER_SUMS = {"kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag_sum"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed: scripts/setup.sh installs prometheus in CI")
        pytest.skip(f"{name} is not installed (Debian: apt-get install prometheus)")
    return path


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], input=stdin, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker after a produce, a commit, a consume and a retention run."""
    from confluent_kafka import Consumer

    from sparklog.compaction.retention import apply_retention

    b = BrokerProcess(str(tmp_path_factory.mktemp("prom") / "data"), metrics=True).start()
    try:
        topic = create(b, "dash", **{"segment.bytes": "2000", "retention.bytes": "3000"})
        produce(b, topic, {0: 60}, one_by_one=True)
        commit(b, "dash-group", {(topic, 0): 10})
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "dash-reader",
                      "auto.offset.reset": "earliest"})  # fmt: skip
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while c.poll(1.0) is None:
            assert time.monotonic() < deadline, "the consumer read nothing"
        c.close()
        apply_retention(b.data_dir)  # every topic, as the scheduler does
        yield b
    finally:
        b.stop()
        b.kill()


def shipped_config(target: str) -> str:
    """``conf/prometheus.yml`` as shipped, scraping ``target`` every second, with the
    alert rules by their absolute path."""
    text = (CONF / "prometheus.yml").read_text()
    for pattern, repl in (
        (r"scrape_interval: 15s", "scrape_interval: 1s"),
        (r"evaluation_interval: 15s", "evaluation_interval: 1s"),
        (r"targets: \[[^\]]*\]", f'targets: ["{target}"]'),
        (r"- sparklog-alerts.yml", f"- {ALERTS}"),
    ):
        text, n = re.subn(pattern, repl, text)
        assert n == 1, f"conf/prometheus.yml no longer has {pattern!r}"
    return text


class Prometheus:
    """A real Prometheus on loopback with ``config``; the API at ``url``."""

    def __init__(self, work: Path, config: str) -> None:
        work.mkdir(parents=True, exist_ok=True)
        (work / "prometheus.yml").write_text(config)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'tsdb'}", "--log.level=warn",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.proc.communicate()[1]
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not get ready"
            time.sleep(0.2)

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def prometheus(
    served: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    target = served.metrics_url.removeprefix("http://").removesuffix("/metrics")
    p = Prometheus(tmp_path_factory.mktemp("prometheus"), shipped_config(target))
    try:
        deadline = time.monotonic() + 60
        while not p.query('up{job="sparklog"} == 1'):  # scraped at least once
            assert time.monotonic() < deadline, p.api("targets")
            time.sleep(0.5)
        yield p
    finally:
        p.stop()


def stored(p: Prometheus, name: str) -> list[dict[str, str]]:
    """The label sets of ``name`` as Prometheus stored them (target labels included)."""
    found = p.api("series", **{"match[]": name})
    assert found, f"prometheus stored no {name}"
    return [dict(s) for s in found]


def series(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    rest = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


def rule_test(tmp_path: Path, input_series: list[dict[str, str]], alerts: list[Any]) -> None:
    """``promtool test rules`` of the shipped alert rules over ``input_series``."""
    spec = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": alerts}],
    }
    path = tmp_path / "rules-test.yml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML
    out = promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------------------- the files


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    out = promtool("check", "rules", str(ALERTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_shipped_prometheus_config_passes_promtool_check_config() -> None:
    out = promtool("check", "config", str(CONF / "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_real_scrape_passes_promtool_check_metrics(served: BrokerProcess) -> None:
    with urllib.request.urlopen(served.metrics_url, timeout=30) as r:
        text = r.read().decode()
    out = promtool("check", "metrics", stdin=text)
    # 3: lint problems only (1 would be text promtool cannot parse)
    assert out.returncode in (0, 3), out.stdout + out.stderr
    problems = {line.split()[0] for line in (out.stdout + out.stderr).splitlines() if line}
    assert problems <= KAFKA_EXPORTER_SUMS, out.stdout + out.stderr


# ------------------------------------------------------------------- alerts on real series


def test_the_job_run_series_keep_their_own_label_next_to_prometheus_job(
    prometheus: Prometheus,
) -> None:
    for labels in stored(prometheus, "sparklog_job_last_run_timestamp_seconds"):
        assert labels["job"] == "sparklog", labels  # the scrape job, as shipped
        assert not any(k.startswith("exported_") for k in labels), labels
    runs = prometheus.query('sparklog_job_last_run_timestamp_seconds{sparklog_job="retention"}')
    assert "dash" in {r["metric"]["topic"] for r in runs}


def test_retention_not_running_fires_a_day_after_the_last_run(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    [last_run] = [s for s in stored(prometheus, "sparklog_job_last_run_timestamp_seconds")
                  if s["topic"] == "dash"]  # fmt: skip
    rule_test(tmp_path, [{"series": series(last_run), "values": "0x1500"}], [
        {"eval_time": "23h", "alertname": "RetentionNotRunning", "exp_alerts": []},
        {"eval_time": "25h", "alertname": "RetentionNotRunning", "exp_alerts": [
            {"exp_labels": {"topic": "dash"},
             "exp_annotations": {"summary": "retention has not run on dash for a day"}}]},
    ])  # fmt: skip


def test_retention_not_running_stays_quiet_while_retention_runs(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    runs = stored(prometheus, "sparklog_job_last_run_timestamp_seconds")
    partitions = stored(prometheus, "kafka_topic_partitions")
    assert {p["topic"] for p in partitions} == {r["topic"] for r in runs}  # every topic ran
    hourly = " ".join(str(m // 60 * 3600) for m in range(0, 1501))  # when the last run ended
    rule_test(tmp_path, [
        *({"series": series(r), "values": hourly} for r in runs),
        *({"series": series(p), "values": "1x1500"} for p in partitions),
    ], [
        {"eval_time": "25h", "alertname": "RetentionNotRunning", "exp_alerts": []},
        {"eval_time": "25h", "alertname": "RetentionNeverRan", "exp_alerts": []},
    ])  # fmt: skip


def test_retention_never_ran_fires_for_a_topic_without_a_run_for_a_day(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    partitions = [p for p in stored(prometheus, "kafka_topic_partitions") if p["topic"] == "dash"]
    rule_test(tmp_path, [{"series": series(p), "values": "1x1500"} for p in partitions], [
        {"eval_time": "23h", "alertname": "RetentionNeverRan", "exp_alerts": []},
        {"eval_time": "25h", "alertname": "RetentionNeverRan", "exp_alerts": [
            {"exp_labels": {"topic": "dash"},
             "exp_annotations": {"summary": "retention has never run on dash"}}]},
    ])  # fmt: skip


# ----------------------------------------------------------------------- the dashboard


def targets() -> list[tuple[str, str, str]]:
    """(panel title, expr, legend) of every dashboard query, ``$job`` as the scrape job."""
    return [
        (p["title"], t["expr"].replace("$job", "sparklog"), t.get("legendFormat", ""))
        for p in dashboard()["panels"]
        for t in p.get("targets", [])
    ]


def test_the_dashboards_job_variable_lists_the_scrape_job(prometheus: Prometheus) -> None:
    [var] = [v for v in dashboard()["templating"]["list"] if v["name"] == "job"]
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["definition"]).groups()  # type: ignore[union-attr]
    assert prometheus.api(f"label/{label}/values", **{"match[]": metric}) == ["sparklog"]


def test_every_dashboard_query_returns_series_with_the_labels_its_legend_shows(
    prometheus: Prometheus,
) -> None:
    wanted = [t for t in targets() if not any(m in t[1] for m in CLUSTER_ONLY)]
    assert len(wanted) > 20
    deadline = time.monotonic() + 90
    pending = list(wanted)
    while pending:  # rates need two scrapes in their window
        pending = [t for t in pending if not prometheus.query(t[1])]
        assert not pending or time.monotonic() < deadline, f"queries with no series: {pending}"
        time.sleep(1)
    for title, expr, legend in wanted:
        for r in prometheus.query(expr):
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
                assert label in r["metric"], (title, expr, legend, r["metric"])


def test_the_job_run_panels_tell_retention_from_compaction(prometheus: Prometheus) -> None:
    runs = [t for t in targets() if "sparklog_job_last_run" in t[1]]
    assert len(runs) == 3
    for title, expr, legend in runs:
        kinds = {r["metric"].get("sparklog_job") for r in prometheus.query(expr)}
        assert kinds == {"retention"}, (title, expr, kinds)
        assert "{{sparklog_job}}" in legend, (title, legend)
