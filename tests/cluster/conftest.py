"""Cluster-mode fixtures: a real etcd (Debian's ``etcd-server``) on loopback."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.harness import EtcdCluster


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
