"""Brokers and ``sparklog cluster describe`` against an etcd that wants TLS with client
certificates and a user (``secure_etcd``): a cluster over it leads partitions and serves
Kafka clients; a broker etcd refuses stops at once with one line, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from sparklog_testkit.processes import BrokerCluster, EtcdCluster
from tests.cluster.conftest import BROKER_PASSWORD, BROKER_USER, EtcdCerts
from tests.cluster.helpers import create_topic

TOPIC = "secured-etcd"
PROJECT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> (
    subprocess.CompletedProcess[str]
):  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args], capture_output=True, text=True,
        timeout=timeout, cwd=PROJECT, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_brokers_configured_in_toml_lead_partitions_and_serve_clients(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts, tmp_path: Path
) -> None:
    """The ``etcd_*`` keys of the broker TOML: two brokers over TLS + authentication
    register, elect a controller, take partitions over (the epoch fence reads etcd on
    every acknowledgement), and a Kafka client produces and consumes; ``cluster describe``
    with the same settings as options (the password from ``SPARKLOG_ETCD_PASSWORD``)
    shows them."""
    secret = tmp_path / "etcd-password"
    secret.write_text(BROKER_PASSWORD + "\n")
    config = tmp_path / "broker.toml"
    config.write_text(
        "[broker]\n"
        f'etcd_ca_file = "{etcd_certs.ca}"\n'
        f'etcd_cert_file = "{etcd_certs.client_cert}"\n'
        f'etcd_key_file = "{etcd_certs.client_key}"\n'
        f'etcd_user = "{BROKER_USER}"\n'
        f'etcd_password_file = "{secret}"\n'
    )
    shared = str(tmp_path / "shared")
    with BrokerCluster(shared, secure_etcd.endpoints, 2, lease_ttl_ms=2000,
                       extra=("--config", str(config))) as c:  # fmt: skip
        leaders = create_topic(c.bootstrap, TOPIC, 4)
        assert set(leaders.values()) == {1, 2}
        p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True})
        for i in range(20):
            p.produce(TOPIC, b"%d" % i, partition=i % 4)
        assert p.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe([TOPIC])
        got: set[bytes] = set()
        try:
            for _ in range(120):
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    got.add(m.value())
                if len(got) == 20:
                    break
        finally:
            consumer.close()
        assert got == {b"%d" % i for i in range(20)}

        described = cli(
            "cluster", "describe", "--etcd", secure_etcd.endpoints, "--json",
            "--etcd-ca-file", etcd_certs.ca, "--etcd-cert-file", etcd_certs.client_cert,
            "--etcd-key-file", etcd_certs.client_key, "--etcd-user", BROKER_USER,
            env={"SPARKLOG_ETCD_PASSWORD": BROKER_PASSWORD},
        )  # fmt: skip
        assert described.returncode == 0, described.stderr
        found = json.loads(described.stdout)
        assert [b["node_id"] for b in found["brokers"]] == [1, 2]
        mine = {p["partition"]: p["leader"] for p in found["partitions"] if p["topic"] == TOPIC}
        assert mine == leaders
        for b in c.brokers.values():  # no etcd call failed (CoordinationError names "etcd at")
            assert not [ln for ln in b.errors() if "etcd at" in ln], b.errors()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong-ca", "not trusted by etcd_ca_file"),
        ("no-client-cert", "wants a client certificate"),
        ("wrong-password", "refused the user or password"),
    ],
)
def test_a_broker_etcd_refuses_stops_with_one_line(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts, tmp_path: Path, case: str, expected: str
) -> None:
    secret = tmp_path / "etcd-password"
    secret.write_text("wrong\n" if case == "wrong-password" else BROKER_PASSWORD)
    ca = etcd_certs.other_ca if case == "wrong-ca" else etcd_certs.ca
    cert: tuple[str, ...] = ()
    if case != "no-client-cert":
        cert = ("--etcd-cert-file", etcd_certs.client_cert,
                "--etcd-key-file", etcd_certs.client_key)  # fmt: skip
    done = cli(
        "broker", "start", "--data-dir", str(tmp_path / "shared"), "--listen", "127.0.0.1:0",
        "--node-id", "1", "--etcd", secure_etcd.endpoints, "--etcd-ca-file", ca, *cert,
        "--etcd-user", BROKER_USER, "--etcd-password-file", str(secret),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sparklog: error: etcd at {secure_etcd.endpoints} refused"), last
    assert expected in last


def test_cluster_describe_refused_prints_one_line(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts
) -> None:
    done = cli(
        "cluster", "describe", "--etcd", secure_etcd.endpoints,
        "--etcd-ca-file", etcd_certs.other_ca, "--etcd-cert-file", etcd_certs.client_cert,
        "--etcd-key-file", etcd_certs.client_key,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # neither a traceback nor gRPC's own log
    assert "etcd's server certificate is not trusted by etcd_ca_file" in lines[0]


def test_a_broker_with_an_etcd_user_and_no_password_stops_before_touching_storage(
    tmp_path: Path,
) -> None:
    """The password never comes from the command line: with neither a password file nor
    SPARKLOG_ETCD_PASSWORD the broker refuses to start, before it creates its data dir."""
    data = tmp_path / "shared"
    env = {k: v for k, v in os.environ.items() if k != "SPARKLOG_ETCD_PASSWORD"}
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "broker", "start", "--data-dir", str(data),
         "--listen", "127.0.0.1:0", "--node-id", "1", "--etcd", "127.0.0.1:1",
         "--etcd-user", BROKER_USER],
        capture_output=True, text=True, timeout=60, cwd=PROJECT, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"sparklog: error: etcd user {BROKER_USER!r} needs a password: etcd_password_file "
        "or the environment variable SPARKLOG_ETCD_PASSWORD"
    )
    assert not data.exists()
