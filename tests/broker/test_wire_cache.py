"""The wire cache (``sparklog.broker.wire_cache``) and the fetch path that serves from it
(``sparklog.broker.handlers.fetch._served``), on real partition logs and real record
batches (aiokafka's builder, as a producer would send them).

What a fetch returns with the cache must decode to exactly what the Arrow path returns
for the same range (same offsets, keys, values, producer fields); the batches the cache
holds come back byte for byte as produced, base offset and leader epoch rewritten."""

from __future__ import annotations

import gc
import struct
import weakref
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.broker.append import _served_as_produced
from sparklog.broker.config import BrokerConfig
from sparklog.broker.handlers.fetch import _encoded, _served
from sparklog.broker.wire_cache import CachedBatches, WireCache
from sparklog.kafka.records import (
    PRODUCER_CODEC,
    DecodedBatch,
    build_batch,
    decode_batch,
    split_batches,
)
from sparklog.storage import Storage
from sparklog.storage.config import TopicConfig
from sparklog.storage.log import PartitionLog

LZ4 = 3


def _records(first: int, n: int) -> list[tuple[int, int, bytes, bytes, list]]:
    return [(i, 1_700_000_000_000 + first + i, b"k%d" % (first + i), b"v%d" % (first + i) * 8, [])
            for i in range(n)]  # fmt: skip


def _produce(log: PartitionLog, cache: WireCache, part: CachedBatches, raw: bytes) -> int:
    """What the append service does with one produced batch: decode, append, keep."""
    batch = decode_batch(memoryview(raw), max_decompressed=1 << 26)
    result = log.append(batch.records, durable=False, codec=batch.codec)
    cache.put(part, result.base_offset, batch.count, memoryview(raw))
    return result.base_offset


def _rows(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of a fetch response's data batches (transaction
    markers are control batches, which a consumer skips too)."""
    out = []
    for raw in split_batches(data):
        (base,) = struct.unpack_from(">q", raw, 0)
        if struct.unpack_from(">h", raw, 21)[0] & 0x20:
            continue
        records = decode_batch(raw, max_decompressed=1 << 26).records
        keys, values = records.column("key").to_pylist(), records.column("value").to_pylist()
        out += [(base + i, keys[i], values[i]) for i in range(records.num_rows)]
    return out


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    storage = Storage(str(tmp_path / "data"))
    storage.topics.create("t", 1)
    return storage.open_log("t", 0)


def test_a_cached_batch_comes_back_as_produced_with_its_offset_rewritten(
    log: PartitionLog,
) -> None:
    cache, part = WireCache(1 << 20), CachedBatches()
    _produce(log, cache, part, build_batch(_records(0, 5)))
    raw = build_batch(_records(5, 7), codec=LZ4)
    base = _produce(log, cache, part, raw)
    log.sync()
    view = log.view()
    data, after, count = _served(cache, part, view, base, view.high_watermark, 1 << 20, True, -1)
    assert (after, count) == (12, 7)
    expected = bytearray(raw)
    struct.pack_into(">q", expected, 0, 5)
    struct.pack_into(">i", expected, 12, -1)
    assert data == bytes(expected)  # the producer's lz4 bytes, not compressed again
    assert decode_batch(memoryview(data), max_decompressed=1 << 26).count == 7  # CRC holds


def test_a_fetch_across_gaps_reads_them_from_storage_and_matches_the_arrow_path(
    log: PartitionLog,
) -> None:
    cache, part = WireCache(1 << 20), CachedBatches()
    _produce(log, cache, part, build_batch(_records(0, 4)))
    log.append_marker(7, 0, commit=False, coordinator_epoch=0, durable=False)  # not produced
    _produce(log, cache, part, build_batch(_records(4, 3), codec=LZ4))
    log.append(
        decode_batch(memoryview(build_batch(_records(7, 2))), max_decompressed=1 << 20).records,
        durable=False,
    )  # fmt: skip  appended, never cached
    _produce(log, cache, part, build_batch(_records(9, 5)))
    log.sync()
    view = log.view()
    end = view.high_watermark
    served, after, count = _served(cache, part, view, 0, end, 1 << 20, True, PRODUCER_CODEC)
    arrow, arrow_after, arrow_count = _encoded(view, 0, end, 1 << 20, True, PRODUCER_CODEC)
    assert (after, count) == (arrow_after, arrow_count) == (end, 15)  # 14 records, 1 marker
    assert _rows(served) == _rows(arrow)


def test_a_fetch_from_the_middle_of_a_cached_batch_returns_the_whole_batch(
    log: PartitionLog,
) -> None:
    cache, part = WireCache(1 << 20), CachedBatches()
    _produce(log, cache, part, build_batch(_records(0, 10)))
    log.sync()
    view = log.view()
    data, after, _ = _served(cache, part, view, 4, view.high_watermark, 1 << 20, True, -1)
    assert after == 10
    assert [o for o, _k, _v in _rows(data)] == list(range(10))  # as Kafka: the client skips


def test_the_oldest_batch_of_any_partition_is_evicted_first(log: PartitionLog) -> None:
    first = build_batch(_records(0, 20))
    cache, a, b = WireCache(2 * len(first) + 10), CachedBatches(), CachedBatches()
    cache.put(a, 0, 20, memoryview(first))
    cache.put(b, 0, 20, memoryview(first))
    cache.put(a, 20, 20, memoryview(first))  # the same size again: one batch must go
    assert a.find(5) == -1 and b.find(5) == 0 and a.find(25) >= 0
    assert cache.bytes <= cache.max_bytes


def test_evicted_ranges_are_read_from_storage(log: PartitionLog) -> None:
    batches = [build_batch(_records(i * 10, 10)) for i in range(6)]
    cache, part = WireCache(2 * len(batches[0]) + 10), CachedBatches()  # holds the last two
    for raw in batches:
        _produce(log, cache, part, raw)
    log.sync()
    view = log.view()
    data, after, count = _served(cache, part, view, 0, view.high_watermark, 1 << 20, True, -1)
    assert (after, count) == (60, 60)
    assert [o for o, _k, _v in _rows(data)] == list(range(60))


def test_a_fetch_stops_at_the_end_offset_and_at_the_budget(log: PartitionLog) -> None:
    cache, part = WireCache(1 << 20), CachedBatches()
    raws = [build_batch(_records(i * 10, 10)) for i in range(4)]
    for raw in raws:
        _produce(log, cache, part, raw)
    log.sync()
    view = log.view()
    _, after, _ = _served(cache, part, view, 0, 20, 1 << 20, True, -1)
    assert after == 20  # end offset 20: two batches
    data, after, _ = _served(cache, part, view, 0, 40, len(raws[0]) + 5, False, -1)
    assert after == 10 and len(data) == len(raws[0])  # budget: one batch
    data, after, _ = _served(cache, part, view, 0, 40, 10, True, -1)
    assert after == 10  # at least one, whatever its size


def test_a_batch_whose_last_offset_delta_disagrees_with_its_count_is_not_kept() -> None:
    raw = bytearray(build_batch(_records(0, 3)))
    struct.pack_into(">i", raw, 23, 5)  # lastOffsetDelta 5 for 3 records
    cache, part = WireCache(1 << 20), CachedBatches()
    cache.put(part, 0, 3, memoryview(raw))
    assert part.find(0) == -1 and cache.bytes == 0


def test_a_batch_behind_the_last_cached_one_is_not_kept() -> None:
    cache, part = WireCache(1 << 20), CachedBatches()
    cache.put(part, 10, 3, memoryview(build_batch(_records(0, 3))))
    cache.put(part, 5, 3, memoryview(build_batch(_records(0, 3))))
    assert part.bases == [10]


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="fetch_cache_bytes"):
        BrokerConfig(fetch_cache_bytes=-1)


def test_the_cache_off_keeps_nothing() -> None:
    cache = WireCache(0)
    assert not cache.enabled
    part = CachedBatches()
    cache.put(part, 0, 3, memoryview(build_batch(_records(0, 3))))
    assert part.find(0) == -1


def test_arrow_records_are_what_the_cached_bytes_decode_to(log: PartitionLog) -> None:
    """The stored Arrow rows of a produced batch and the batch the cache serves hold the
    same records (the two paths of one fetch agree)."""
    cache, part = WireCache(1 << 20), CachedBatches()
    _produce(log, cache, part, build_batch(_records(0, 50), codec=LZ4))
    log.sync()
    view = log.view()
    stored = pa.Table.from_batches(list(view.batches(0)))
    served, _, _ = _served(cache, part, view, 0, 50, 1 << 20, True, -1)
    assert _rows(served) == list(
        zip(stored.column("offset").to_pylist(), stored.column("key").to_pylist(),
            stored.column("value").to_pylist(), strict=True)
    )  # fmt: skip


def _decoded(raw: bytes) -> DecodedBatch:
    return decode_batch(memoryview(raw), max_decompressed=1 << 20)


@pytest.mark.parametrize(
    ("configs", "kept"),
    [
        ({}, True),
        ({"compression.type": "lz4"}, True),  # the batch's own codec
        ({"compression.type": "zstd"}, False),  # Kafka recompresses it
        ({"message.timestamp.type": "LogAppendTime"}, False),
        ({"cleanup.policy": "compact"}, False),
    ],
)
def test_which_topics_batches_are_served_as_produced(configs: dict[str, str], kept: bool) -> None:
    config = TopicConfig.from_mapping(configs)
    assert _served_as_produced(config, _decoded(build_batch(_records(0, 3), codec=LZ4))) is kept


def test_a_batch_the_log_stores_otherwise_is_not_served_as_produced() -> None:
    config = TopicConfig.from_mapping({})
    stamped = build_batch(_records(0, 3), log_append_time=True)  # stored as CreateTime
    assert not _served_as_produced(config, _decoded(stamped))
    no_pid = build_batch(_records(0, 3), producer_epoch=3)  # stored with epoch -1
    assert not _served_as_produced(config, _decoded(no_pid))


def test_a_dropped_partitions_batches_go_with_it() -> None:
    raw = memoryview(build_batch(_records(0, 20)))
    cache, part = WireCache(3 * len(raw)), CachedBatches()
    cache.put(part, 0, 20, raw)
    ref = weakref.ref(part)
    del part  # its handle given up: nothing else holds it
    gc.collect()
    assert ref() is None
    other = CachedBatches()
    for i in range(3):  # evicts the dropped partition's entry without touching it
        cache.put(other, i * 20, 20, raw)
    assert cache.bytes == 3 * len(raw) and other.find(0) == 0
