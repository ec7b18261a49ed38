"""Kafka's default partitioner for keyed records: murmur2 of the key.

``murmur2_partition`` is the Java client's (and Spark's Kafka sink's, kafka-python's and
librdkafka's ``murmur2_random``) choice for a non-null key, so a key lands on the partition
Kafka would choose. (librdkafka's own default, ``consistent_random``, hashes with CRC32.)
"""

from __future__ import annotations


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed int32."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
