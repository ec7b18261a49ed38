"""Fetched record batches carry the codec their producer compressed them with, as Kafka's do
with ``compression.type=producer`` (the default), from the active segment and from a sealed
one; a topic with a fixed ``compression.type`` serves every batch in that codec.

confluent-kafka (librdkafka) produces with ``compression.codec`` gzip, snappy, lz4 and zstd;
a raw Fetch (v12, sparklog's own client) reads the codec bits (``attributes & 0x07``) of
every returned batch, and kafka-python and kcat consume the same records.

Checked against Apache Kafka 4.3.1 (``bench/_kafka.py``, one KRaft node): confluent-kafka
producing 100 compressible records per codec into ``compression.type=producer`` topics,
then the same raw Fetch v12: Kafka returned each producer's batch with attributes 0, 1, 2,
3, 4 for none, gzip, snappy, lz4, zstd (for snappy: attributes 2, the producer's own bytes),
and from a ``compression.type=zstd`` topic attributes 4 for both a none and a snappy
producer. A transactional lz4 producer's batch came back as 0x13 (0x14 from a zstd topic)
and its commit marker as 0x30 from both: markers are never compressed.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.kafka.records import split_batches
from sparklog.storage import Storage

from .clients import KCAT, Client, KafkaPython, Kcat, Start, deadline_loop
from .conftest import BrokerProcess
from .rawclient import fetch_partition0

CODEC_BITS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNT = 100
VALUES = [b"record %03d of a compressible topic " % i * 4 for i in range(COUNT)]
# Topics: "active-<codec>" holds one produced batch in its active segment; "sealed-<codec>"
# rolls at every batch (segment.bytes 100), so its first batch is read from Parquet;
# "zstd-<codec>" has compression.type=zstd.
TOPICS = {
    **{f"active-{c}": {} for c in CODEC_BITS},
    **{f"sealed-{c}": {"segment.bytes": "100"} for c in CODEC_BITS},
    **{f"zstd-{c}": {"compression.type": "zstd"} for c in ("none", "snappy")},
}
# A transactional lz4 producer's one committed transaction, in a topic of each kind.
TXN_TOPICS = {"txn-producer": {}, "txn-zstd": {"compression.type": "zstd"}}


def _produce(bootstrap: str, topic: str, codec: str, first: int, stop: int) -> None:
    """Records ``first .. stop - 1`` of VALUES, in one produce batch."""
    p = Producer({"bootstrap.servers": bootstrap, "compression.codec": codec,
                  "linger.ms": 100, "acks": "all"})  # fmt: skip
    for i in range(first, stop):
        p.produce(topic, value=VALUES[i], key=b"key-%d" % i, partition=0)
    assert p.flush(30) == 0


def _produce_transaction(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "compression.codec": "lz4",
                  "linger.ms": 100, "transactional.id": f"tx-{topic}"})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(COUNT):
        p.produce(topic, value=VALUES[i], key=b"key-%d" % i, partition=0)
    p.commit_transaction(30)


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker; each topic of TOPICS holds VALUES produced by confluent-kafka with the
    codec its name ends in (the sealed ones in two produce batches, the first sealed)."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("codecs") / "data")).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topics = {**TOPICS, **TXN_TOPICS}
        futures = admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in topics.items()])
        for f in futures.values():
            f.result(30)
        for topic in TOPICS:
            codec = topic.split("-", 1)[1]
            if topic.startswith("sealed-"):
                _produce(b.bootstrap, topic, codec, 0, COUNT // 2)
                _produce(b.bootstrap, topic, codec, COUNT // 2, COUNT)
            else:
                _produce(b.bootstrap, topic, codec, 0, COUNT)
        for topic in TXN_TOPICS:
            _produce_transaction(b.bootstrap, topic)
        storage = Storage(b.data_dir)
        for topic in (t for t in TOPICS if t.startswith("sealed-")):
            reader = storage.reader(topic, 0)  # sealing runs in the background
            for _ in deadline_loop(60):
                if reader.view().manifest.segments[0].sealed:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"the first segment of {topic} was not sealed")
        yield b
    finally:
        b.stop()
        b.kill()


def _fetch(bootstrap: str, topic: str) -> bytes:
    """The record batches of a raw Fetch v12 of ``topic``'s partition 0 from offset 0."""
    part = fetch_partition0(bootstrap, topic)
    assert int(part.error_code) == 0
    return bytes(part.records or b"")


def _attributes(data: bytes) -> list[int]:
    """The attributes of each record batch of a fetch response's records."""
    return [struct.unpack_from(">h", b, 21)[0] for b in split_batches(data)]


def _codecs(data: bytes) -> list[int]:
    """The codec bits of each record batch of a fetch response's records."""
    return [a & 0x07 for a in _attributes(data)]


@pytest.mark.parametrize("codec", CODEC_BITS)
def test_active_segment_batches_come_back_in_the_producers_codec(
    produced: BrokerProcess, codec: str
) -> None:
    assert _codecs(_fetch(produced.bootstrap, f"active-{codec}")) == [CODEC_BITS[codec]]


@pytest.mark.parametrize("codec", CODEC_BITS)
def test_sealed_segment_batches_come_back_in_the_producers_codec(
    produced: BrokerProcess, codec: str
) -> None:
    assert _codecs(_fetch(produced.bootstrap, f"sealed-{codec}")) == [CODEC_BITS[codec]] * 2


@pytest.mark.parametrize("codec", ["none", "snappy"])
def test_a_zstd_topic_serves_zstd_whatever_the_producer_used(
    produced: BrokerProcess, codec: str
) -> None:
    assert _codecs(_fetch(produced.bootstrap, f"zstd-{codec}")) == [4]


def test_compressed_batches_are_smaller_on_the_wire(produced: BrokerProcess) -> None:
    plain = len(_fetch(produced.bootstrap, "active-none"))
    sizes = {c: len(_fetch(produced.bootstrap, f"active-{c}")) for c in CODEC_BITS}
    # VALUES compress ~10x; served uncompressed, every topic would fetch `plain` bytes
    assert all(size < plain / 3 for c, size in sizes.items() if c != "none"), sizes


CONSUMERS = [
    pytest.param(KafkaPython(), id="kafka-python"),
    pytest.param(
        Kcat(), id="kcat", marks=pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
    ),
]


@pytest.mark.parametrize("where", ["active", "sealed"])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("client", CONSUMERS)
def test_consumers_read_the_compressed_batches(
    produced: BrokerProcess, client: Client, codec: str, where: str
) -> None:
    got = client.consume(produced.bootstrap, f"{where}-{codec}", 0, Start(), COUNT)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"key-%d" % i, v) for i, v in enumerate(VALUES)
    ]


@pytest.mark.parametrize(("topic", "data_batch"), [("txn-producer", 0x13), ("txn-zstd", 0x14)])
def test_a_transactions_batch_keeps_its_codec_and_its_marker_stays_uncompressed(
    produced: BrokerProcess, topic: str, data_batch: int
) -> None:
    got: list[int] = []
    for _ in deadline_loop(30):  # the marker is written once the commit is acknowledged
        got = _attributes(_fetch(produced.bootstrap, topic))
        if len(got) == 2:
            break
        time.sleep(0.05)
    assert got == [data_batch, 0x30]  # transactional | codec; control | transactional
