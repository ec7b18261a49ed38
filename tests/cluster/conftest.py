"""Cluster-mode fixtures: a real etcd (Debian's ``etcd-server``) on loopback; one over TLS
with client certificates and authentication (certificates from trustme)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparklog.cluster.etcd import EtcdSettings
from sparklog_testkit.processes import EtcdCluster, EtcdServerTls

#: the etcd user brokers authenticate as in ``secure_etcd`` (role: read and write /sparklog/)
BROKER_USER, BROKER_PASSWORD = "sparklog-broker", "broker-secret"


def _need_etcd() -> None:
    if shutil.which("etcd") is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed: scripts/setup.sh installs etcd-server in CI")
        pytest.skip("etcd is not installed (Debian: apt-get install etcd-server)")


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    """One etcd member."""
    _need_etcd()
    with EtcdCluster(str(tmp_path / "etcd"), members=1) as cluster:
        yield cluster


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    """Three etcd members in one cluster."""
    _need_etcd()
    with EtcdCluster(str(tmp_path / "etcd3"), members=3) as cluster:
        yield cluster


@dataclass(frozen=True)
class EtcdCerts:
    """PEM files: the CA etcd and its clients trust, etcd's certificate (127.0.0.1), a
    client certificate of that CA whose common name is ``BROKER_USER`` (etcd takes it as
    the user when a client gives none), one whose common name is no etcd user, and a CA
    nothing was issued by (a wrong one)."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    stranger_cert: str
    stranger_key: str
    other_ca: str


@pytest.fixture
def etcd_certs(tmp_path: Path) -> EtcdCerts:
    import trustme

    where = tmp_path / "etcd-certs"
    where.mkdir()
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("broker.example", common_name=BROKER_USER)
    stranger = ca.issue_cert("stranger.example", common_name="stranger")
    files = EtcdCerts(*(str(where / n) for n in (
        "ca.pem", "server.pem", "server.key", "client.pem", "client.key", "stranger.pem",
        "stranger.key", "other-ca.pem")))  # fmt: skip
    ca.cert_pem.write_to_path(files.ca)
    server.cert_chain_pems[0].write_to_path(files.server_cert)
    server.private_key_pem.write_to_path(files.server_key)
    client.cert_chain_pems[0].write_to_path(files.client_cert)
    client.private_key_pem.write_to_path(files.client_key)
    stranger.cert_chain_pems[0].write_to_path(files.stranger_cert)
    stranger.private_key_pem.write_to_path(files.stranger_key)
    other.cert_pem.write_to_path(files.other_ca)
    return files


def secured_etcd(
    work_dir: str, certs: EtcdCerts, auth_token_ttl_s: int | None = None
) -> EtcdCluster:
    """One etcd member on https with ``--client-cert-auth``, authentication enabled, and
    ``BROKER_USER`` allowed the keys under ``/sparklog/``; started."""
    tls = EtcdServerTls(certs.server_cert, certs.server_key, certs.ca)
    cluster = EtcdCluster(work_dir, tls=tls, auth_token_ttl_s=auth_token_ttl_s).start()
    try:
        admin = EtcdSettings(cluster.endpoints, certs.ca, certs.client_cert, certs.client_key)
        cluster.enable_auth(admin, "root-secret", {BROKER_USER: BROKER_PASSWORD})
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture
def secure_etcd(tmp_path: Path, etcd_certs: EtcdCerts) -> Iterator[EtcdCluster]:
    """See ``secured_etcd``."""
    _need_etcd()
    cluster = secured_etcd(str(tmp_path / "etcd-tls"), etcd_certs)
    try:
        yield cluster
    finally:
        cluster.stop()


def broker_etcd(cluster: EtcdCluster, certs: EtcdCerts, **changes: str | None) -> EtcdSettings:
    """How a broker reaches ``secure_etcd``: its CA, the client certificate, the broker
    user; ``changes`` replace any of them."""
    values: dict[str, str | None] = {
        "endpoints": cluster.endpoints, "ca_file": certs.ca, "cert_file": certs.client_cert,
        "key_file": certs.client_key, "user": BROKER_USER, "password": BROKER_PASSWORD,
    }  # fmt: skip
    values.update(changes)
    return EtcdSettings(**values)  # type: ignore[arg-type]
