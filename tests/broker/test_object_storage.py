"""A broker whose storage root is on object storage (a real S3 server, SeaweedFS): its
active segments live in a local cache directory, appends are committed in flush rounds to
the bucket, and a machine that dies with its cache loses nothing acknowledged."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from sparklog.storage import names
from sparklog.storage.fs.s3 import S3FileSystem
from sparklog_testkit.processes import BrokerProcess
from sparklog_testkit.s3proxy import S3FaultProxy

from ..support.s3 import SeaweedS3
from . import raw_frames as rf
from .rawclient import fetch_partition0


@pytest.fixture
def s3_uri(s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)  # the broker processes inherit them
    yield f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"


def _produce(
    bootstrap: str, topic: str, n: int, partitions: int = 2
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every acknowledged record."""
    acked: list[tuple[int, int, bytes]] = []

    def done(err: object, msg: object) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})  # fmt: skip
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=i % partitions, on_delivery=done)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return acked


def _consume(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    empty = 0
    while empty < 5:
        batch = c.consume(1000, timeout=1)
        empty = 0 if batch else empty + 1
        out += [(m.partition(), m.offset(), m.value()) for m in batch if m.error() is None]
    c.close()
    return out


def test_a_killed_broker_whose_cache_is_gone_loses_nothing_acknowledged(
    s3_uri: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    broker = BrokerProcess(s3_uri, extra=("--cache-dir", str(cache), "--flush-ms", "20"))
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("t", 2, 1)]).values():
            f.result(30)
        acked = _produce(broker.bootstrap, "t", 3000)
        assert len(acked) == 3000
        broker.kill()  # SIGKILL: no close, no flush
        shutil.rmtree(cache)  # the machine is gone
        broker.start()
        got = _consume(broker.bootstrap, "t", 2)
    assert sorted(got) == sorted(acked)
    fs, root = S3FileSystem.from_uri(s3_uri)
    partition = names.partition_dir(root, "t", 0)
    assert not [n for n in fs.listdir(partition) if n.endswith(".arrow")]


def test_a_broker_on_object_storage_needs_no_local_data_dir(s3_uri: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with BrokerProcess(s3_uri, extra=("--cache-dir", str(cache))) as broker:
        acked = _produce(broker.bootstrap, "auto", 10, partitions=1)  # auto-created, one partition
        assert len(acked) == 10
    fs, root = S3FileSystem.from_uri(s3_uri)
    assert fs.exists(names.owner_path(root))
    assert fs.listdir(names.wal_dir(root, names.EMBEDDED_WRITER))


def test_a_quiet_partition_seals_once_segment_ms_has_passed(s3_uri: str, tmp_path: Path) -> None:
    """Readers of the bucket (Spark, the jobs) see sealed segments only: a broker on object
    storage rolls and seals a partition nobody writes to once segment.ms has passed."""
    with BrokerProcess(s3_uri, extra=("--cache-dir", str(tmp_path / "cache"))) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = NewTopic("quiet", 1, 1, config={"segment.ms": "1000"})
        for f in admin.create_topics([topic]).values():
            f.result(30)
        assert len(_produce(broker.bootstrap, "quiet", 50, partitions=1)) == 50
        fs, root = S3FileSystem.from_uri(s3_uri)
        partition = names.partition_dir(root, "quiet", 0)
        deadline = time.monotonic() + 30
        while not [n for n in fs.listdir(partition) if n.endswith(".parquet")]:
            assert time.monotonic() < deadline, "the quiet partition never sealed"
            time.sleep(0.5)


def test_cluster_mode_refuses_a_store_without_atomic_create(s3_server: SeaweedS3) -> None:
    """pyarrow's S3 filesystem checks, then writes: two brokers could both create one
    manifest version. The S3 backend's conditional PUT passes the probe."""
    import pyarrow.fs as pafs

    from sparklog.broker.object_storage import check_atomic_create
    from sparklog.errors import ObjectStoreError
    from sparklog.storage.fs.arrow import ArrowFileSystem

    env = s3_server.env()
    arrow = ArrowFileSystem(
        pafs.S3FileSystem(
            access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=s3_server.endpoint,
            scheme="http",
            region=env["AWS_REGION"],
        )
    )
    with pytest.raises(ObjectStoreError, match="atomic create-if-absent"):
        check_atomic_create(arrow, f"{s3_server.bucket}/probe", "s3a://bucket/probe")
    s3 = S3FileSystem(s3_server.bucket, environ=env)
    check_atomic_create(s3, f"{s3_server.bucket}/{uuid.uuid4().hex}", "s3://bucket/x")


def _fetch_sealed_with_store_failing(
    s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_bytes: int
) -> tuple[int, int]:
    """20 records produced and sealed into the bucket, the sealed cache file collected; the
    error codes of a fetch from offset 0 with the store answering 500, then once it is
    back. ``cache_bytes``: the broker's ``fetch_cache_bytes``."""
    conf = tmp_path / "broker.toml"
    conf.write_text(f"[broker]\nfetch_cache_bytes = {cache_bytes}\n")
    with S3FaultProxy(s3_server.endpoint) as proxy:
        for k, v in proxy.env(s3_server.env()).items():
            monkeypatch.setenv(k, v)
        uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
        extra = ("--cache-dir", str(tmp_path / "cache"), "--config", str(conf))
        with BrokerProcess(uri, extra=extra) as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topic = NewTopic("sealed", 1, 1, config={"segment.ms": "500"})
            for f in admin.create_topics([topic]).values():
                f.result(30)
            assert len(_produce(broker.bootstrap, "sealed", 20, partitions=1)) == 20
            fs, root = S3FileSystem.from_uri(uri)
            partition = names.partition_dir(root, "sealed", 0)
            deadline = time.monotonic() + 30
            while not [n for n in fs.listdir(partition) if n.endswith(".parquet")]:
                assert time.monotonic() < deadline, "never sealed"
                time.sleep(0.3)
            time.sleep(2)  # the sealed cache file is collected; its records are in the bucket
            proxy.error(500)
            failing = int(fetch_partition0(broker.bootstrap, "sealed").error_code)
            proxy.pass_through()
            return failing, int(fetch_partition0(broker.bootstrap, "sealed").error_code)


def test_a_fetch_the_failing_store_cannot_serve_answers_kafka_storage_error(
    s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealed records live in the bucket only (the broker's fetch cache off): with the
    store answering 500, their fetch answers KAFKA_STORAGE_ERROR (retriable), the broker
    keeps serving, and the same fetch succeeds once the store is back."""
    got = _fetch_sealed_with_store_failing(s3_server, tmp_path, monkeypatch, 0)
    assert got == (ErrorCode.kafka_storage_error, 0)


def test_recent_records_are_fetched_from_the_broker_while_the_store_fails(
    s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the fetch cache on (the default), the batches this broker appended are served
    from its memory (``sparklog.broker.wire_cache``): the failing store is not asked."""
    got = _fetch_sealed_with_store_failing(s3_server, tmp_path, monkeypatch, 256 << 20)
    assert got == (0, 0)


def test_a_topic_deleted_and_created_again_does_not_find_the_old_tail(
    s3_uri: str, tmp_path: Path
) -> None:
    """The old topic's records were committed in the tail and never sealed; the new topic
    of the same name starts empty, and stays so when the broker is killed and restarts."""
    with BrokerProcess(s3_uri, extra=("--cache-dir", str(tmp_path / "cache"))) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def create() -> None:
            for f in admin.create_topics([NewTopic("again", 1, 1)]).values():
                f.result(30)

        create()
        assert len(_produce(broker.bootstrap, "again", 20, partitions=1)) == 20
        for f in admin.delete_topics(["again"]).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while True:  # a topic deleted is gone from the metadata before its name is free
            try:
                create()
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.5)
        acked = _produce(broker.bootstrap, "again", 3, partitions=1)
        assert sorted(acked) == [(0, 0, b"v0"), (0, 1, b"v1"), (0, 2, b"v2")]
        assert sorted(_consume(broker.bootstrap, "again", 1)) == sorted(acked)
        broker.kill()
        broker.start()
        assert sorted(_consume(broker.bootstrap, "again", 1)) == sorted(acked)


def test_pipelined_requests_for_many_partitions_share_a_round(s3_uri: str, tmp_path: Path) -> None:
    """librdkafka puts one partition in each produce request; on object storage each waits
    for a flush round, so the broker takes many pipelined requests of one connection at
    once (``BrokerConfig.inflight_requests``) and they commit in one or two rounds, not in
    one round per 8 requests."""
    partitions = 64
    extra = ("--cache-dir", str(tmp_path / "cache"), "--flush-ms", "1000")
    with BrokerProcess(s3_uri, extra=extra) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("wide", partitions, 1)]).values():
            f.result(30)
        assert len(_produce(broker.bootstrap, "wide", partitions, partitions)) == partitions
        fs, root = S3FileSystem.from_uri(s3_uri)
        wal = names.wal_dir(root, names.EMBEDDED_WRITER)
        rounds_before = len(fs.listdir(wal))
        with rf.RawConnection(broker.port, timeout=30) as conn:
            conn.send(b"".join(
                rf.request(rf.PRODUCE, 9, rf.produce_body("wide", p, rf.record_batch([b"x"])),
                           correlation_id=p)
                for p in range(partitions)
            ))  # fmt: skip
            for p in range(partitions):
                frame = conn.recv_frame(timeout=30)
                assert frame is not None
                corr, resp = rf.parse_response(rf.PRODUCE, 9, frame)
                assert (corr, resp.responses[0].partition_responses[0].error_code) == (p, 0)
        assert len(fs.listdir(wal)) - rounds_before <= 2
