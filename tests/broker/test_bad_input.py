"""Malformed, hostile and unusual requests over raw sockets against a real broker.

Each test sends one kind of bad input and checks the broker's answer (an error code, a
closed connection, or silence), then that the same broker still serves a well-formed client
(confluent-kafka producer and consumer, plus a raw ApiVersions on a new connection).
"""

from __future__ import annotations

import os
import random
import resource
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.apis import APIS
from sparklog.storage import Storage

from . import raw_frames as rf
from .conftest import BrokerProcess

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
QUIET = {"log_level": 0}  # librdkafka: no disconnect chatter on stderr


# ---------------------------------------------------------------------------- helpers


def _poll_one(consumer: Consumer, timeout: float = 10.0) -> Message:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError("no record consumed in time")


def assert_serving(
    broker: BrokerProcess, topic: str = "healthy", expect_offset: int | None = None
) -> int:
    """The broker is alive, answers ApiVersions on a new connection, and a confluent-kafka
    producer's record (acks=all) is read back by a consumer at its acknowledged offset.
    Returns that offset (``expect_offset``, when given, must match it)."""
    assert broker.alive, "broker process died:\n" + "\n".join(broker.lines[-20:])
    rf.check_api_versions(broker.port)
    value = uuid.uuid4().bytes
    reports: list[tuple[object, int]] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", **QUIET})
    producer.produce(
        topic,
        value=value,
        partition=0,
        on_delivery=lambda err, msg: reports.append((err, msg.offset())),
    )
    assert producer.flush(15) == 0
    [(err, offset)] = reports
    assert err is None, err
    if expect_offset is not None:
        assert offset == expect_offset
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "bad-input-check",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            **QUIET,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        msg = _poll_one(consumer)
        assert msg.value() == value
        assert msg.offset() == offset
    finally:
        consumer.close()
    return offset


def broker_pid(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return broker.proc.pid


def high_watermark(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    """The partition's high watermark read from storage (any process may read it)."""
    return Storage(broker.data_dir).reader(topic, partition).view().high_watermark


def produce_raw(
    broker: BrokerProcess, topic: str, records: bytes, *, version: int = 9
) -> tuple[int, str | None]:
    """(error code, error message) of a one-partition raw Produce (acks=-1)."""
    with rf.RawConnection(broker.port) as conn:
        resp = conn.roundtrip(rf.PRODUCE, version, rf.produce_body(topic, 0, records))
    [topic_resp] = resp.responses
    [part] = topic_resp.partition_responses
    return int(part.error_code), getattr(part, "error_message", None)


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.fixture
def small_limits_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker whose compressed batches may expand to 1 MiB at most."""
    config = tmp_path / "broker.toml"
    config.write_text("[broker]\nmax_decompressed_batch_bytes = 1048576\n")
    b = BrokerProcess(str(tmp_path / "broker-data"), extra=("--config", str(config))).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


# ---------------------------------------------------------------------------- framing


@pytest.mark.parametrize(
    "data",
    [b"\x00\x00", b"\x00\x00\x00\x64" + b"\x00\x12" * 5, rf.head_only(18, 3)[:-3]],
    ids=["half-size-prefix", "body-10-of-100", "header-cut"],
)
def test_truncated_frame_then_close_is_ignored(broker: BrokerProcess, data: bytes) -> None:
    with rf.RawConnection(broker.port) as conn:
        conn.send(data)
        time.sleep(0.2)
    assert_serving(broker)


@pytest.mark.parametrize("declared", [2**31 - 1, 100 * 1024 * 1024 + 1])
def test_oversized_declared_length_closes_without_reading_body(
    broker: BrokerProcess, declared: int
) -> None:
    hwm_before = rf.vm_kb(broker_pid(broker), "VmHWM")
    with rf.RawConnection(broker.port) as conn:
        start = time.monotonic()
        conn.send(rf.sized(b"\x00\x12\x00\x03\x00\x00\x00\x01", declared=declared))
        assert conn.closed_by_peer(timeout=5.0)
        assert time.monotonic() - start < 2.0
    assert rf.vm_kb(broker_pid(broker), "VmHWM") - hwm_before < 32 * 1024
    assert broker.wait_for_line(lambda line: "closing" in line and str(declared) in line)
    assert_serving(broker)


@pytest.mark.parametrize("declared", [-1, -(2**31), 0, 7])
def test_negative_or_tiny_declared_length_closes(broker: BrokerProcess, declared: int) -> None:
    with rf.RawConnection(broker.port) as conn:
        conn.send(rf.sized(b"\x00\x12\x00\x03\x00\x00\x00\x01", declared=declared))
        assert conn.closed_by_peer(timeout=5.0)
    assert_serving(broker)


def test_random_bytes_do_not_disturb_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(20240611)
    for _ in range(20):
        blob = rng.randbytes(rng.randrange(1, 2048))
        with rf.RawConnection(broker.port) as conn:
            conn.send(blob)
            # the broker either closes, or waits for the rest of a declared body
            conn.closed_by_peer(timeout=0.05)
    assert_serving(broker)


@pytest.mark.parametrize("api_key", [200, 999, -1, 32767])
def test_unknown_api_key_closes_the_connection(broker: BrokerProcess, api_key: int) -> None:
    assert api_key not in APIS
    with rf.RawConnection(broker.port) as conn:
        conn.send(rf.head_only(api_key, 0))
        assert conn.closed_by_peer(timeout=5.0)
    assert_serving(broker)


@pytest.mark.parametrize(
    ("api_key", "version"), [(0, 2), (0, 10), (1, 13), (3, 0), (3, 13), (19, 99)]
)
def test_unsupported_version_of_known_api_closes(
    broker: BrokerProcess, api_key: int, version: int
) -> None:
    with rf.RawConnection(broker.port) as conn:
        conn.send(rf.head_only(api_key, version))
        assert conn.closed_by_peer(timeout=5.0)
    assert_serving(broker)


@pytest.mark.parametrize("version", [4, 99, -1])
def test_api_versions_unsupported_version_gets_v0_error_with_supported_list(
    broker: BrokerProcess, version: int
) -> None:
    with rf.RawConnection(broker.port) as conn:
        # a newer client's body the broker cannot parse: only the header may be relied on
        conn.send(rf.head_only(rf.API_VERSIONS, version, correlation_id=4242))
        frame = conn.recv_frame()
        assert frame is not None, "connection closed instead of an UNSUPPORTED_VERSION answer"
        corr, resp = rf.parse_response(rf.API_VERSIONS, 0, frame)
        assert corr == 4242
        assert int(resp.error_code) == UNSUPPORTED_VERSION
        got = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
        assert got == {k: (a.min_version, a.max_version) for k, a in APIS.items()}
        # KIP-511: the client retries with a version it now knows, on the same connection
        again = conn.roundtrip(rf.API_VERSIONS, 0, {}, correlation_id=4243)
        assert int(again.error_code) == 0
    assert_serving(broker)


# ---------------------------------------------------------------------------- produce


def test_produce_with_bad_crc_is_corrupt_message_and_writes_nothing(
    broker: BrokerProcess,
) -> None:
    batch = bytearray(rf.record_batch([b"one", b"two"]))
    batch[-1] ^= 0x01  # a record byte: covered by the CRC
    code, _ = produce_raw(broker, "crc", bytes(batch))
    assert code == CORRUPT_MESSAGE
    assert high_watermark(broker, "crc") == 0
    assert_serving(broker, "crc", expect_offset=0)


@pytest.mark.parametrize("magic", [0, 1])
def test_produce_legacy_magic_is_unsupported_for_message_format(
    broker: BrokerProcess, magic: int
) -> None:
    topic = f"magic{magic}"
    code, _ = produce_raw(broker, topic, rf.record_batch([b"old"], magic=magic), version=3)
    assert code == UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert high_watermark(broker, topic) == 0
    assert_serving(broker, topic, expect_offset=0)


def test_produce_gzip_garbage_is_corrupt_message(broker: BrokerProcess) -> None:
    """BUG: records that are not gzip (valid CRC, gzip codec bit) raise zlib.error out of
    ``batches._gzip_into``; the produce handler does not catch it, so the broker drops the
    connection instead of answering CORRUPT_MESSAGE (clients then retry the batch forever)."""
    garbage = rf.raw_batch(b"this is not a gzip member" * 4, codec=1)
    code, _ = produce_raw(broker, "gzip-garbage", garbage)
    assert code == CORRUPT_MESSAGE
    assert high_watermark(broker, "gzip-garbage") == 0
    assert_serving(broker, "gzip-garbage", expect_offset=0)


def test_produce_snappy_negative_chunk_size_is_corrupt_message(broker: BrokerProcess) -> None:
    """BUG: a snappy batch framed the xerial way whose first chunk length is -4 sends
    ``batches._snappy`` into an endless loop that also grows a list: the event loop is
    stuck, so every connection hangs and the broker's memory climbs until it is killed."""
    payload = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", -4)
    try:
        with rf.RawConnection(broker.port, timeout=5.0) as conn:
            conn.send(
                rf.request(
                    rf.PRODUCE, 9, rf.produce_body("snappy", 0, rf.raw_batch(payload, codec=2))
                )
            )
            try:
                frame = conn.recv_frame(timeout=5.0)
            except TimeoutError:
                frame = None
        assert frame is not None, "no answer within 5 s: the broker is wedged"
        _, resp = rf.parse_response(rf.PRODUCE, 9, frame)
        assert int(resp.responses[0].partition_responses[0].error_code) == CORRUPT_MESSAGE
    except AssertionError:
        broker.kill()  # a wedged broker eats memory as long as it runs
        raise
    assert_serving(broker, "snappy", expect_offset=0)


def test_batch_larger_than_max_message_bytes_is_message_too_large(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    futures = admin.create_topics(
        [NewTopic("small-max", 1, 1, config={"max.message.bytes": "2000"})]
    )
    futures["small-max"].result(15)
    code, _ = produce_raw(broker, "small-max", rf.record_batch([os.urandom(5000)]))
    assert code == MESSAGE_TOO_LARGE
    assert high_watermark(broker, "small-max") == 0
    assert_serving(broker, "small-max", expect_offset=0)


@pytest.mark.parametrize(("codec", "name"), [(1, "gzip"), (4, "zstd")])
def test_decompression_bomb_is_refused_with_bounded_memory(
    small_limits_broker: BrokerProcess, codec: int, name: str
) -> None:
    broker = small_limits_broker
    records = rf.bomb_records(codec, 512 * 1024 * 1024)  # 512 MiB of zeros, < 1 MiB on wire
    assert len(records) < 1024 * 1024
    bomb = rf.raw_batch(records, codec=codec)
    assert_serving(broker, f"bomb-{name}", expect_offset=0)  # warm up: topic and buffers
    pid = broker_pid(broker)
    peak_before = rf.vm_kb(pid, "VmHWM")
    for _ in range(3):
        code, message = produce_raw(broker, f"bomb-{name}", bomb)
        assert code == MESSAGE_TOO_LARGE, message
    grew_kb = rf.vm_kb(pid, "VmHWM") - peak_before
    assert grew_kb < 64 * 1024, f"broker peak RSS grew by {grew_kb} kB"
    assert high_watermark(broker, f"bomb-{name}") == 1
    assert_serving(broker, f"bomb-{name}", expect_offset=1)


def _produce_acks_0_then_api_versions(broker: BrokerProcess, topic: str) -> int:
    """Send an acks=0 Produce then an ApiVersions on one connection; the correlation id of
    the first response that comes back."""
    with rf.RawConnection(broker.port) as conn:
        body = rf.produce_body(topic, 0, rf.record_batch([b"fire-and-forget"]), acks=0)
        conn.send(rf.request(rf.PRODUCE, 9, body, correlation_id=1))
        conn.send(rf.request(rf.API_VERSIONS, 3, rf.api_versions_body(3), correlation_id=2))
        frame = conn.recv_frame()
        assert frame is not None
        corr, resp = rf.parse_response(rf.API_VERSIONS, 3, frame)
        assert int(resp.error_code) == 0
        return corr


def test_produce_acks_0_sends_no_response(broker: BrokerProcess) -> None:
    assert _produce_acks_0_then_api_versions(broker, "acks0") == 2
    # the record was appended all the same: the next one gets offset 1
    assert_serving(broker, "acks0", expect_offset=1)


def test_produce_acks_0_record_becomes_readable(broker: BrokerProcess) -> None:
    """An acks=0 record is visible to consumers without waiting for a later acks!=0 one."""
    _produce_acks_0_then_api_versions(broker, "acks0")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "acks0", "fetch.wait.max.ms": 50}
        | QUIET
    )
    try:
        consumer.assign([TopicPartition("acks0", 0, 0)])
        msg = _poll_one(consumer, timeout=10.0)
        assert msg.value() == b"fire-and-forget"
    finally:
        consumer.close()
    assert_serving(broker, "acks0", expect_offset=1)


# ---------------------------------------------------------------------------- array counts


@pytest.fixture
def capped_broker(broker: BrokerProcess) -> BrokerProcess:
    """The broker with its address space capped at 6 GiB (it peaks near 1.5 GiB), so that
    a 16-32 GiB allocation fails here exactly as it does on any host with less memory."""
    pid = broker_pid(broker)
    resource.prlimit(pid, resource.RLIMIT_AS, (6 << 30, 6 << 30))
    return broker


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (rf.METADATA, 12, b"\xff\xff\xff\xff\x0f" + bytes(30)),
        (rf.METADATA, 1, b"\x7f\xff\xff\xff" + bytes(30)),
    ],
    ids=["compact-array-2^32-2", "int32-array-2^31-1"],
)
def test_huge_array_count_does_not_kill_the_broker(
    capped_broker: BrokerProcess, api_key: int, version: int, body: bytes
) -> None:
    """BUG: kio's native reader calls ``Vec::with_capacity(count)`` with the count from the
    wire before reading any element; a 45-byte Metadata request asks for 16-32 GiB and the
    broker aborts (SIGABRT, Rust "memory allocation failed"), dropping every client."""
    broker = capped_broker
    frame = rf.sized(rf.header_bytes(api_key, version) + body)
    with rf.RawConnection(broker.port) as conn:
        conn.send(frame)
        assert conn.closed_by_peer(timeout=5.0)
    time.sleep(0.2)
    assert broker.alive, "broker died:\n" + "\n".join(broker.lines[-3:])
    assert_serving(broker)


# ---------------------------------------------------------------------------- open files


@pytest.fixture
def fd_capped_broker(broker: BrokerProcess) -> BrokerProcess:
    """The broker with 1024 file descriptors, the usual default soft limit."""
    resource.prlimit(broker_pid(broker), resource.RLIMIT_NOFILE, (1024, 1024))
    return broker


def test_metadata_of_a_wide_topic_keeps_the_broker_serving(
    fd_capped_broker: BrokerProcess,
) -> None:
    """BUG: Metadata opens every partition log of the topics it describes
    (``cluster._topic_entry`` -> ``PartitionManager.partition``) and keeps each open with 6
    file descriptors (.arrow, .index, .timeindex, each twice). 300 partitions - far below
    MAX_PARTITIONS (10,000) - exhaust 1024 descriptors: the Metadata request fails and, as
    the handles stay open, so does every later request, ApiVersions included."""
    broker = fd_capped_broker
    body = {
        "topics": [
            {
                "name": "wide",
                "num_partitions": 300,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 5000,
        "validate_only": False,
    }
    with rf.RawConnection(broker.port) as conn:
        created = conn.roundtrip(rf.CREATE_TOPICS, 7, body)
    assert int(created.topics[0].error_code) == 0
    meta = {
        "topics": [{"topic_id": None, "name": "wide"}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    with rf.RawConnection(broker.port, timeout=30.0) as conn:
        resp = conn.roundtrip(rf.METADATA, 12, meta)
    [topic] = resp.topics
    assert int(topic.error_code) == 0
    assert sorted(int(p.partition_index) for p in topic.partitions) == list(range(300))
    assert_serving(broker)


# ---------------------------------------------------------------------------- topic names

BAD_NAMES = {"dotdot": "..", "slash": "a/b", "long": "t" * 250}


def _metadata(broker: BrokerProcess, name: str, version: int) -> int:
    if version >= 12:
        body = {
            "topics": [{"topic_id": None, "name": name}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        }
    else:
        body = {"topics": [{"name": name}]}
    with rf.RawConnection(broker.port) as conn:
        resp = conn.roundtrip(rf.METADATA, version, body)
    [topic] = resp.topics
    return int(topic.error_code)


def _produce(broker: BrokerProcess, name: str, version: int) -> int:
    code, _ = produce_raw(broker, name, rf.record_batch([b"x"]), version=version)
    return code


def _create_topics(broker: BrokerProcess, name: str, version: int) -> int:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 5000,
        "validate_only": False,
    }
    with rf.RawConnection(broker.port) as conn:
        resp = conn.roundtrip(rf.CREATE_TOPICS, version, body)
    [topic] = resp.topics
    return int(topic.error_code)


REQUESTS = {
    "metadata-v1": (_metadata, 1),
    "metadata-v12": (_metadata, 12),
    "produce-v3": (_produce, 3),
    "produce-v9": (_produce, 9),
    "create-topics-v2": (_create_topics, 2),
    "create-topics-v7": (_create_topics, 7),
}


@pytest.mark.parametrize("name_id", sorted(BAD_NAMES))
@pytest.mark.parametrize("request_id", sorted(REQUESTS))
def test_invalid_topic_name_is_refused_and_creates_nothing(
    broker: BrokerProcess, tmp_path: Path, request_id: str, name_id: str
) -> None:
    send, version = REQUESTS[request_id]
    data = Path(broker.data_dir)
    before_tmp, before_data = tree(tmp_path), tree(data)
    assert send(broker, BAD_NAMES[name_id], version) == INVALID_TOPIC_EXCEPTION
    assert tree(tmp_path) == before_tmp
    assert tree(data) == before_data
    assert_serving(broker)


def test_assert_serving_detects_a_dead_broker(broker: BrokerProcess) -> None:
    """The check used after every bad input does fail when the broker is gone."""
    broker.kill()
    with pytest.raises((AssertionError, KafkaException, OSError)):
        assert_serving(broker)
