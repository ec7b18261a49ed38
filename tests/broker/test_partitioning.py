"""Keyed records land where Kafka puts them: the same key always in the same partition.

The broker does not choose partitions, the clients do, from the partition count the broker
reports in Metadata; so what is checked is that every record of a client's default (or
named) partitioner is stored in the partition that partitioner's reference formula gives,
computed here independently: Java's ``Utils.murmur2(key) & 0x7fffffff % n`` (kafka-python,
aiokafka, librdkafka's ``murmur2_random``) and ``crc32(key) % n`` (librdkafka's default
``consistent_random``). The broker is stopped and storage read to see where records went.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import zlib
from collections.abc import Callable

import pytest

from sparklog.storage import Storage

from .conftest import BrokerProcess
from .rawclient import RawClient

PARTITIONS = 7
KEYS = [f"key-{i}".encode() for i in range(120)] + [
    b"21",
    b"foobar",
    b"a-little-bit-longer-string",
    bytes(range(11, 60)),  # binary (no tab or newline: kcat reads lines)
    "clé-ünïcode".encode(),
    b"\xff\xfe\xfd",
]
ROUNDS = 2  # every key is sent twice
TIMEOUT = 10.0


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit result, as Java's int)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[length - length % 4 :]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, n: int) -> int:
    """Kafka's default partitioner for a keyed record (``Utils.toPositive(murmur2) % n``)."""
    return (murmur2(key) & 0x7FFFFFFF) % n


def crc32_partition(key: bytes, n: int) -> int:
    """librdkafka's ``consistent_random`` for a non-empty key."""
    return zlib.crc32(key) % n


def test_own_murmur2_matches_kafkas_reference_vectors() -> None:
    # the vectors of Kafka's UtilsTest.testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


# ---------------------------------------------------------------------------- producers


def values() -> list[tuple[bytes, bytes]]:
    """(key, value) pairs; the value names its key and round."""
    return [(k, k + b"#%d" % r) for r in range(ROUNDS) for k in KEYS]


def produce_kafka_python(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [p.send(topic, key=k, value=v) for k, v in values()]
        p.flush(TIMEOUT)
        for f in futures:
            f.get(TIMEOUT)
    finally:
        p.close(TIMEOUT)


def produce_confluent(bootstrap: str, topic: str, partitioner: str | None) -> None:
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    if partitioner is not None:
        config["partitioner"] = partitioner
    p = Producer(config)
    errors: list[object] = []
    try:
        for k, v in values():
            p.produce(topic, key=k, value=v, on_delivery=lambda e, _m: e and errors.append(e))
        assert p.flush(TIMEOUT) == 0
    finally:
        p.close()
    assert errors == []


def produce_aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await p.start()
        try:
            futures = [await p.send(topic, key=k, value=v) for k, v in values()]
            await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT)
        finally:
            await p.stop()

    asyncio.run(run())


KCAT = shutil.which("kcat")


def produce_kcat(bootstrap: str, topic: str) -> None:
    # keys and values go through a text pipe: only keys without tabs and newlines
    assert KCAT is not None
    lines = b"".join(k + b"\t" + v + b"\n" for k, v in values())
    assert lines.count(b"\t") == len(values()) and lines.count(b"\n") == len(values())
    done = subprocess.run(
        [KCAT, "-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-X", "acks=all"],
        input=lines,
        capture_output=True,
        timeout=TIMEOUT + 5,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()


CASES = [
    pytest.param(produce_kafka_python, java_partition, id="kafka-python-default"),
    pytest.param(
        lambda b, t: produce_confluent(b, t, "murmur2_random"),
        java_partition,
        id="confluent-murmur2_random",
    ),
    pytest.param(
        lambda b, t: produce_confluent(b, t, None),
        crc32_partition,
        id="confluent-default-consistent_random",
    ),
    pytest.param(produce_aiokafka, java_partition, id="aiokafka-default"),
    pytest.param(
        produce_kcat,
        crc32_partition,
        id="kcat-default-consistent_random",
        marks=pytest.mark.skipif(KCAT is None, reason="kcat is not installed"),
    ),
]


@pytest.mark.parametrize(("produce", "expected_partition"), CASES)
def test_keyed_records_are_stored_in_the_partition_of_their_key(
    broker: BrokerProcess,
    produce: Callable[[str, str], None],
    expected_partition: Callable[[bytes, int], int],
) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("keyed", PARTITIONS).error_code == 0
    produce(broker.bootstrap, "keyed")
    assert broker.stop() == 0

    storage = Storage(broker.data_dir)
    where: dict[bytes, int] = {}  # value -> partition it is stored in
    for p in range(PARTITIONS):
        view = storage.reader("keyed", p).view()  # never written: an empty log
        for batch in view.batches(view.log_start_offset):
            for key, value in zip(
                batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True
            ):
                assert value.rsplit(b"#", 1)[0] == key
                assert value not in where, f"{value!r} stored twice"
                where[value] = p
    assert sorted(where) == sorted(v for _, v in values())
    wrong = {
        v: (where[v], expected_partition(k, PARTITIONS))
        for k, v in values()
        if where[v] != expected_partition(k, PARTITIONS)
    }
    assert wrong == {}  # value -> (stored in, expected)
    assert len(set(where.values())) > 1  # the keys really spread over partitions
