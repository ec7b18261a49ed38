"""Kafka's default partitioner for keyed records, against kafka-python's implementation."""

from __future__ import annotations

import random

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from sparklog.kafka.partitioner import murmur2, murmur2_partition


def test_murmur2_is_kafkas() -> None:
    rng = random.Random(7)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"user-0042"]
    keys += [rng.randbytes(rng.randrange(0, 40)) for _ in range(300)]
    for key in keys:
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF, key
        assert murmur2_partition(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7
