"""Helpers of the cluster tests: a cluster with a topic (on a shared directory, or on
object storage: ``s3_cluster_with_topic``), and its partitions' leaders."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sparklog_testkit.processes import BrokerCluster, BrokerProcess, EtcdCluster

from ..support.s3 import SeaweedS3


def leaders(
    bootstrap: str, topic: str, partitions: int, avoid: int | None = None, timeout: float = 30
) -> dict[int, int]:
    """partition -> leader, once every partition of ``topic`` has a live leader other than
    ``avoid`` (as the broker that answers Metadata sees it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        except KafkaException:  # a broker that cannot reach etcd closes Metadata connections
            assert time.monotonic() < deadline
            time.sleep(0.2)
            continue
        found = {p.id: p.leader for p in md.topics[topic].partitions.values()}
        if len(found) == partitions and all(n > 0 and n != avoid for n in found.values()):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> dict[int, int]:
    """Create ``topic`` (with topic ``configs``) and wait for its leaders."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=configs or {})
    for f in admin.create_topics([new]).values():
        f.result(30)
    return leaders(bootstrap, topic, partitions)


@contextlib.contextmanager
def cluster_with_topic(
    etcd: EtcdCluster, tmp_path: Path, topic: str, partitions: int, **kw: Any
) -> Iterator[BrokerCluster]:
    """Three brokers over ``tmp_path/shared`` (lease TTL 2 s unless given) with ``topic``."""
    kw.setdefault("lease_ttl_ms", 2000)
    with BrokerCluster(str(tmp_path / "shared"), etcd.endpoints, 3, **kw) as c:
        create_topic(c.bootstrap, topic, partitions)
        yield c


@contextlib.contextmanager
def s3_cluster_with_topic(
    etcd: EtcdCluster,
    s3: SeaweedS3,
    tmp_path: Path,
    topic: str,
    partitions: int,
    *,
    configs: dict[str, str] | None = None,
    flush_ms: int = 25,
    env: dict[int, dict[str, str]] | None = None,
    **kw: Any,
) -> Iterator[BrokerCluster]:
    """Three brokers that share nothing but ``s3`` and ``etcd`` (lease TTL 2 s unless
    given), with ``topic``: the storage root a fresh prefix of the bucket, each broker its
    own cache directory (``tmp_path/cache<i>``: ``cache_dir``), flush rounds every
    ``flush_ms``. The S3 server's ``AWS_*`` variables are in this process's environment for
    the block (the brokers inherit them). ``env``: more variables for a broker's first
    start only (node id -> variables), e.g. an armed crash point."""
    kw.setdefault("lease_ttl_ms", 2000)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s3.env().items():
            mp.setenv(k, v)
        root = f"s3://{s3.bucket}/{uuid.uuid4().hex}"
        c = BrokerCluster(root, etcd.endpoints, 3, **kw)
        for i, b in c.brokers.items():
            cache = str(tmp_path / f"cache{i}")
            b.extra = (*b.extra, "--cache-dir", cache, "--flush-ms", str(flush_ms))
        try:
            for i, b in c.brokers.items():
                start_with_env(b, (env or {}).get(i, {}))
            create_topic(c.bootstrap, topic, partitions, configs)
            yield c
        finally:
            c.stop()


def start_with_env(broker: BrokerProcess, env: dict[str, str]) -> None:
    """Start ``broker`` with ``env`` added to the environment it inherits (this start only)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        broker.start()


def cache_dir(c: BrokerCluster, i: int) -> str:
    """Broker ``i``'s ``--cache-dir`` (``s3_cluster_with_topic``)."""
    extra = c.brokers[i].extra
    return extra[extra.index("--cache-dir") + 1]


def lose_machine(c: BrokerCluster, i: int) -> None:
    """SIGKILL broker ``i`` (if it still runs) and delete its cache directory: the machine
    is gone, only the bucket and etcd remain."""
    c.brokers[i].kill()
    shutil.rmtree(cache_dir(c, i), ignore_errors=True)
    assert not os.path.exists(cache_dir(c, i))


def broker_logs(c: BrokerCluster, path: Path) -> None:
    """Every line the brokers logged, ``[node id] line``, to ``path`` (kept with the test's
    tmp_path for a failure's post-mortem)."""
    path.write_text("\n".join(f"[{i}] {ln}" for i, b in c.brokers.items() for ln in b.lines))
