"""Four real Kafka clients against a real broker process: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat (a subprocess).

Produce: each client sends one record set (keys, a null key, headers, a tombstone, two
explicit partitions, explicit timestamps) with each compression codec; the broker is then
stopped and storage must hold exactly those records, in order, at dense offsets. Consume: a
record set written byte-for-byte with the raw client (two batches, headers, a null key, a
null and an empty value) must come back exactly (offsets, keys, values, headers,
timestamps) from the earliest offset - also from topics whose ``compression.type`` makes
the broker compress fetches with each codec, and from a sealed segment - from a given
offset, from a timestamp, and from the latest offset (only records produced after the
consumer is positioned). Metadata and the topic admin calls go through the clients that
have them (confluent's AdminClient, kafka-python's KafkaAdminClient, aiokafka's
AIOKafkaAdminClient); what they create is checked in storage.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from sparklog.storage import Storage

from .clients import (
    CLIENTS,
    CODECS,
    SEEDED_TOPICS,
    T0,
    Client,
    Rec,
    Start,
    deadline_loop,
    read_storage,
    seed,
    skip_missing_codec,
    with_offsets,
    without_internal,
)
from .conftest import BrokerProcess
from .rawclient import RawClient

# ---------------------------------------------------------------------------- produce

# Compressible values, so that every codec really compresses.
PRODUCED = [
    Rec(0, b"key-0", b"value-0 " * 20, (), T0),
    Rec(0, None, b"no key " * 20, (), T0 + 1),
    Rec(0, b"key-2", None, (), T0 + 2),  # tombstone
    Rec(1, b"key-3", b"value-3 " * 20, (("h1", b"x"), ("h2", b"yy")), T0 + 3),
    Rec(1, b"key-4", b"value-4 " * 20, (("h1", b"z"),), T0 + 4),
    Rec(0, b"key-5", b"value-5 " * 20, (), T0 + 5),
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_produced_records_are_stored_exactly(
    broker: BrokerProcess, client: Client, codec: str
) -> None:
    skip_missing_codec(client, codec)
    topic = "produced"
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic(topic, 2).error_code == 0
    before = int(time.time() * 1000)
    client.produce(broker.bootstrap, topic, PRODUCED, codec)
    after = int(time.time() * 1000)
    assert broker.stop() == 0

    stored = read_storage(broker.data_dir, topic)
    expected = with_offsets(PRODUCED)
    if not client.sets_timestamps:  # the client stamps the produce time
        assert all(s.timestamp is not None and before <= s.timestamp <= after for s in stored)
        stored = [replace(s, timestamp=None) for s in stored]
        expected = [replace(e, timestamp=None) for e in expected]
    assert stored == expected


# ---------------------------------------------------------------------------- consume

# Written as two record batches to partition 0 (offsets 0-2 and 3-5), one to partition 1.
SEEDED = [
    Rec(0, b"key-0", b"value-0", (), T0, 0),
    Rec(0, None, b"no key", (("h1", b"x"),), T0 + 10, 1),
    Rec(0, b"key-2", None, (), T0 + 20, 2),  # tombstone
    Rec(0, b"key-3", b"value-3", (("h1", b"a"), ("h2", b"")), T0 + 30, 3),
    Rec(0, b"key-4", b"", (), T0 + 40, 4),  # empty, not null
    Rec(0, b"key-5", b"value-5 " * 50, (("h", b"1"),), T0 + 50, 5),
]
SEEDED_P1 = [Rec(1, b"p1", b"only in partition 1", (), T0 + 5, 0)]


@pytest.fixture(scope="module")
def seeded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the consume tests; each of SEEDED_TOPICS holds SEEDED in partition 0
    and SEEDED_P1 in partition 1."""
    b = BrokerProcess(str(tmp_path_factory.mktemp("seeded") / "data")).start()
    try:
        with RawClient.connect(b.bootstrap) as raw:
            for variant, configs in SEEDED_TOPICS.items():
                topic = f"seeded-{variant}"
                assert raw.create_topic(topic, 2, configs).error_code == 0
                seed(raw, topic, SEEDED[:3])
                seed(raw, topic, SEEDED[3:])
                seed(raw, topic, SEEDED_P1)
        reader = Storage(b.data_dir).reader("seeded-sealed", 0)  # sealing runs in background
        for _ in deadline_loop():
            if any(info.sealed for info in reader.view().manifest.segments):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the segments of seeded-sealed were not sealed")
        yield b
    finally:
        b.stop()
        b.kill()


@pytest.mark.parametrize("variant", SEEDED_TOPICS)
@pytest.mark.parametrize("client", CLIENTS)
def test_consume_from_earliest(seeded_broker: BrokerProcess, client: Client, variant: str) -> None:
    skip_missing_codec(client, variant)
    got = client.consume(seeded_broker.bootstrap, f"seeded-{variant}", 0, Start(), 6)
    assert got == SEEDED


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_other_partition(seeded_broker: BrokerProcess, client: Client) -> None:
    got = client.consume(seeded_broker.bootstrap, "seeded-producer", 1, Start(), 1)
    assert got == SEEDED_P1


@pytest.mark.parametrize("variant", ["producer", "sealed"])
@pytest.mark.parametrize("client", CLIENTS)
def test_consume_from_offset(seeded_broker: BrokerProcess, client: Client, variant: str) -> None:
    # offset 1 is inside the first stored batch
    got = client.consume(seeded_broker.bootstrap, f"seeded-{variant}", 0, Start(offset=1), 5)
    assert got == SEEDED[1:]


@pytest.mark.parametrize("variant", ["producer", "sealed"])
@pytest.mark.parametrize("client", CLIENTS)
def test_consume_from_timestamp(seeded_broker: BrokerProcess, client: Client, variant: str) -> None:
    # the first record at or after T0 + 15 is offset 2 (T0 + 20), inside the first batch
    start = Start(timestamp=T0 + 15)
    got = client.consume(seeded_broker.bootstrap, f"seeded-{variant}", 0, start, 4)
    assert got == SEEDED[2:]


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_from_latest_sees_only_new_records(
    seeded_broker: BrokerProcess, client: Client
) -> None:
    topic = f"latest-{client.name}"
    new = [
        Rec(0, b"new-0", b"after", (("h", b"n"),), T0 + 100, 6),
        Rec(0, None, b"after too", (), T0 + 101, 7),
    ]
    with RawClient.connect(seeded_broker.bootstrap) as raw:
        assert raw.create_topic(topic, 1).error_code == 0
        seed(raw, topic, SEEDED[:3])
        seed(raw, topic, SEEDED[3:])

        def produce_more() -> None:
            seed(raw, topic, new)

        got = client.consume_new(seeded_broker.bootstrap, topic, 0, produce_more, 2)
    assert got == new


# ---------------------------------------------------------------------------- metadata


@pytest.mark.parametrize("client", CLIENTS)
def test_metadata_lists_topics_and_partition_counts(broker: BrokerProcess, client: Client) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("meta-one", 1).error_code == 0
        assert raw.create_topic("meta-three", 3).error_code == 0
    listed = without_internal(client.list_topics(broker.bootstrap))
    assert listed == {"meta-one": 1, "meta-three": 3}
