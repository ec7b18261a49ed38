"""Compaction through Spark on real storage: updates, tombstones, min lag, dirty ratio,
offsets preserved, and a read from offset 0 equal to a model's last value per key."""

from __future__ import annotations

import itertools
import os
import random
import time
from typing import Any

import pytest

from sparklog.compaction.compactor import compact
from sparklog.compaction.retention import apply_retention
from sparklog.errors import CompactionRunningError
from sparklog.storage import Storage, names
from sparklog.storage.lease import compaction_lease

from .helpers import TOPIC, Model, append, manifest, random_batch, read_all, rows

pytestmark = pytest.mark.spark

NOW = int(time.time() * 1000)
MINUTE = 60_000


def _storage(root: str, partitions: int = 1, **configs: str) -> Storage:
    s = Storage(root)
    base = {"cleanup.policy": "compact"}
    s.topics.create(
        TOPIC, partitions, {**base, **{k.replace("_", "."): v for k, v in configs.items()}}
    )
    return s


def _fill(
    storage: Storage,
    model: Model,
    *,
    segments: int,
    per: int,
    keys: int,
    seed: int,
    partition: int = 0,
    ts: int = NOW - 10 * MINUTE,
) -> None:
    rng = random.Random(seed)
    for i in range(segments):
        k, v = random_batch(rng, per, keys, tag=f"{seed}.{i}")
        append(storage, model, partition, k, v, ts=ts + i * per)


def _section_end(storage: Storage, partition: int = 0) -> int:
    return manifest(storage, partition).active.base_offset


def test_read_from_zero_after_compaction_equals_the_models_last_value_per_key(
    spark: Any, root: str
) -> None:
    storage = _storage(root)
    model = Model()
    _fill(storage, model, segments=6, per=300, keys=40, seed=1)
    before = manifest(storage)
    report = compact(spark, root, [TOPIC], now_ms=NOW)
    (outcome,) = report.outcomes
    assert outcome.status == "compacted"
    got = read_all(storage, start=0)
    assert got == model.compacted(_section_end(storage))
    assert len({r[1] for r in got}) == len(got) == 40
    assert (outcome.records_before, outcome.records_after) == (1800, 40)
    after = manifest(storage)
    assert after.version == before.version + 1
    assert after.log_start_offset == 0
    assert all(s.generation >= 1 for s in after.segments[:-1])
    assert after.segments[0].base_offset == 0
    assert after.segments[-2].next_offset == before.segments[-2].next_offset


def test_a_run_records_what_it_removed_for_metrics(spark: Any, root: str) -> None:
    from sparklog.storage import jobruns

    storage = _storage(root)
    _fill(storage, Model(), segments=4, per=100, keys=10, seed=2)
    (outcome,) = compact(spark, root, [TOPIC], now_ms=NOW).outcomes
    run = jobruns.last(storage.fs, storage.root, TOPIC, "compaction")
    assert run is not None and run.partitions == 1
    assert run.records_removed == outcome.records_before - outcome.records_after > 0
    assert run.bytes_removed == outcome.bytes_before - outcome.bytes_after


def test_offsets_and_every_column_of_a_kept_record_are_unchanged(spark: Any, root: str) -> None:
    storage = _storage(root)
    model = Model()
    _fill(storage, model, segments=3, per=50, keys=5, seed=2)
    view = storage.reader(TOPIC, 0).view()
    original = {r["offset"]: r for b in view.batches(0) for r in b.to_pylist()}
    compact(spark, root, [TOPIC], now_ms=NOW)
    after = storage.reader(TOPIC, 0).view()
    kept = [r for b in after.batches(0) for r in b.to_pylist()]
    assert kept and all(original[r["offset"]] == r for r in kept)
    offsets = [r["offset"] for r in kept]
    assert offsets == sorted(offsets)


def test_keys_seen_only_in_older_clean_segments_are_kept(spark: Any, root: str) -> None:
    storage = _storage(root, min_cleanable_dirty_ratio="0.01")
    model = Model()
    append(storage, model, 0, [b"a", b"b", b"a"], [b"a1", b"b1", b"a2"], ts=NOW - MINUTE)
    compact(spark, root, [TOPIC], now_ms=NOW)
    append(storage, model, 0, [b"c", b"a"], [b"c1", b"a3"], ts=NOW - MINUTE)
    compact(spark, root, [TOPIC], now_ms=NOW)
    got = [(r[1], r[2]) for r in read_all(storage, start=0)]
    assert got == [(b"b", b"b1"), (b"c", b"c1"), (b"a", b"a3")]
    assert read_all(storage, start=0) == model.compacted(_section_end(storage))


def test_tombstones_stay_for_delete_retention_ms_after_their_first_compaction(
    spark: Any, root: str
) -> None:
    storage = _storage(root, delete_retention_ms=str(10 * MINUTE))
    model = Model()
    append(storage, model, 0, [b"a", b"b", b"c"], [b"a1", b"b1", b"c1"], ts=NOW - MINUTE)
    append(storage, model, 0, [b"a", b"c"], [None, b"c2"], ts=NOW - MINUTE)
    end = _section_end(storage)
    compact(spark, root, [TOPIC], now_ms=NOW)
    assert [(r[1], r[2]) for r in read_all(storage, 0)] == [
        (b"b", b"b1"),
        (b"a", None),
        (b"c", b"c2"),
    ]
    assert manifest(storage).segments[0].first_tombstone == 3
    # not yet: nothing to do, nothing committed
    version = manifest(storage).version
    (early,) = compact(spark, root, [TOPIC], now_ms=NOW + 9 * MINUTE).outcomes
    assert early.status == "skipped" and manifest(storage).version == version
    # delete.retention.ms after the first compaction the tombstone goes, with no new data
    (late,) = compact(spark, root, [TOPIC], now_ms=NOW + 10 * MINUTE).outcomes
    assert late.status == "compacted" and late.tombstones_removed == 1
    assert late.reason == "tombstones past delete.retention.ms"
    assert read_all(storage, 0) == model.compacted(end, tombstones=False)
    assert [(r[1], r[2]) for r in read_all(storage, 0)] == [(b"b", b"b1"), (b"c", b"c2")]
    assert manifest(storage).segments[0].first_tombstone is None


def test_tombstone_of_a_key_updated_after_it_is_just_an_old_record(spark: Any, root: str) -> None:
    storage = _storage(root, delete_retention_ms="0")
    model = Model()
    append(storage, model, 0, [b"a", b"a", b"a"], [b"1", None, b"3"], ts=NOW - MINUTE)
    compact(spark, root, [TOPIC], now_ms=NOW)
    assert [(r[0], r[2]) for r in read_all(storage, 0)] == [(2, b"3")]


def test_records_newer_than_min_compaction_lag_are_kept(spark: Any, root: str) -> None:
    # the clean and the dirty segment are about the same size, so the dirty ratio sits at
    # ~0.5 and a byte of zstd output decides it; this test is about the lag, not the ratio
    storage = _storage(
        root, min_compaction_lag_ms=str(5 * MINUTE), min_cleanable_dirty_ratio="0.01"
    )
    model = Model()
    append(storage, model, 0, [b"a", b"b"], [b"old-a", b"old-b"], ts=NOW - 10 * MINUTE)
    append(storage, model, 0, [b"a", b"a"], [b"mid-a", b"new-a"], ts=NOW - MINUTE)
    (outcome,) = compact(spark, root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.end_offset == 2  # the young segment is not in the section
    assert read_all(storage, 0) == model.records  # nothing in [0, 2) was superseded within it
    (later,) = compact(spark, root, [TOPIC], now_ms=NOW + 5 * MINUTE).outcomes
    assert later.status == "compacted" and later.end_offset == 4, later.reason
    assert [(r[1], r[2]) for r in read_all(storage, 0)] == [(b"b", b"old-b"), (b"a", b"new-a")]


def test_partition_below_the_dirty_ratio_is_left_alone(spark: Any, root: str) -> None:
    storage = _storage(root, min_cleanable_dirty_ratio="0.5")
    model = Model()
    _fill(storage, model, segments=4, per=200, keys=200, seed=3)
    compact(spark, root, [TOPIC], now_ms=NOW)
    clean = manifest(storage)
    append(storage, model, 0, [b"k000"], [b"update"], ts=NOW - MINUTE)
    (outcome,) = compact(spark, root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.status == "skipped"
    assert "< min.cleanable.dirty.ratio 0.5" in outcome.reason
    assert manifest(storage).segments[:-2] == clean.segments[:-1]


def test_outputs_stay_within_segment_bytes_and_cover_the_section_contiguously(
    spark: Any, root: str
) -> None:
    storage = _storage(root, segment_bytes="5000")
    model = Model()
    _fill(storage, model, segments=8, per=300, keys=600, seed=4)
    before = manifest(storage)
    compact(spark, root, [TOPIC], now_ms=NOW)
    after = manifest(storage)
    outputs = after.segments[:-1]
    assert 1 < len(outputs) < len(before.segments) - 1
    assert outputs[0].base_offset == 0
    assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(after.segments))
    assert all(s.size_bytes <= 1.5 * 5000 for s in outputs)
    assert read_all(storage, 0) == model.compacted(_section_end(storage))


def test_records_without_a_key_are_dropped_as_kafka_does(spark: Any, root: str) -> None:
    storage = _storage(root)
    model = Model()
    append(storage, model, 0, [None, b"a", None], [b"x", b"a1", b"y"], ts=NOW - MINUTE)
    (outcome,) = compact(spark, root, [TOPIC], now_ms=NOW).outcomes
    assert [(r[1], r[2]) for r in read_all(storage, 0)] == [(b"a", b"a1")]
    assert outcome.records_after == 1


def test_every_partition_is_compacted_independently_in_one_job(spark: Any, root: str) -> None:
    storage = _storage(root, partitions=3)
    models = [Model() for _ in range(3)]
    for p in range(3):
        _fill(storage, models[p], segments=3, per=100, keys=10 * (p + 1), seed=10 + p, partition=p)
    report = compact(spark, root, now_ms=NOW)
    assert sorted(o.partition for o in report.outcomes if o.status == "compacted") == [0, 1, 2]
    for p in range(3):
        assert read_all(storage, p, start=0) == models[p].compacted(_section_end(storage, p))


def test_spark_parquet_reader_and_the_datasource_read_compacted_segments(
    spark: Any, root: str
) -> None:
    storage = _storage(root)
    model = Model()
    _fill(storage, model, segments=3, per=100, keys=7, seed=5)
    compact(spark, root, [TOPIC], now_ms=NOW)
    expected = [(r[0], r[1], r[2]) for r in model.compacted(_section_end(storage))]
    path = names.partition_dir(storage.root, TOPIC, 0)
    files = [os.path.join(path, s.name) for s in manifest(storage).segments if s.sealed]
    by_spark = spark.read.parquet(*files).select("offset", "key", "value").orderBy("offset")
    assert [tuple(r) for r in by_spark.collect()] == expected
    from sparklog.spark import register

    register(spark)
    by_source = spark.read.format("sparklog").option("subscribe", TOPIC).load(root)
    got = by_source.select("offset", "key", "value").orderBy("offset").collect()
    assert [(r[0], bytes(r[1]), bytes(r[2])) for r in got] == expected


def test_a_reader_holding_the_old_version_keeps_reading_it(spark: Any, root: str) -> None:
    storage = _storage(root)
    model = Model()
    _fill(storage, model, segments=3, per=100, keys=7, seed=6)
    old_view = storage.reader(TOPIC, 0).view()
    compact(spark, root, [TOPIC], now_ms=NOW)
    assert rows(old_view.batches(0)) == model.records
    path = names.partition_dir(storage.root, TOPIC, 0)
    assert {s.name for s in old_view.manifest.segments} <= set(os.listdir(path))


def test_a_second_run_with_nothing_new_commits_nothing(spark: Any, root: str) -> None:
    storage = _storage(root)
    _fill(storage, Model(), segments=2, per=50, keys=5, seed=7)
    compact(spark, root, [TOPIC], now_ms=NOW)
    version = manifest(storage).version
    (outcome,) = compact(spark, root, [TOPIC], now_ms=NOW).outcomes
    assert (outcome.status, outcome.reason) == ("skipped", "nothing dirty")
    assert manifest(storage).version == version


def test_retention_swapping_out_an_input_meanwhile_is_a_conflict_not_a_mix(
    spark: Any, root: str
) -> None:
    storage = _storage(root, cleanup_policy="compact,delete", retention_ms=str(30 * MINUTE))
    model = Model()
    _fill(storage, model, segments=2, per=50, keys=5, seed=8, ts=NOW - 60 * MINUTE)
    _fill(storage, model, segments=2, per=50, keys=5, seed=9, ts=NOW - 10 * MINUTE)
    before = manifest(storage)

    def meanwhile(line: str) -> None:
        if line.startswith("compaction: ") and "rewriting" in line:
            apply_retention(root, [TOPIC], now_ms=NOW)

    (outcome,) = compact(spark, root, [TOPIC], now_ms=NOW, progress=meanwhile).outcomes
    assert outcome.status == "conflict"
    assert "no longer live" in outcome.reason
    after = manifest(storage)
    assert after.log_start_offset == 100
    assert after.segments == before.segments[2:]  # retention's set, untouched by compaction
    assert read_all(storage) == model.records[100:]


def test_a_second_job_on_the_same_topic_is_refused(spark: Any, root: str) -> None:
    storage = _storage(root)
    _fill(storage, Model(), segments=1, per=10, keys=5, seed=11)
    held = storage.leases.acquire(compaction_lease(TOPIC), "another job")
    with held, pytest.raises(CompactionRunningError, match=TOPIC):
        compact(spark, root, [TOPIC], now_ms=NOW)


def test_a_spark_read_below_a_log_start_retention_moved_follows_fail_on_data_loss(
    spark: Any, root: str
) -> None:
    storage = Storage(root)
    storage.topics.create("events", 1, {"retention.ms": str(30 * MINUTE)})
    model = Model()
    append(storage, model, 0, [b"a"] * 5, [b"old%d" % i for i in range(5)],
           ts=NOW - 60 * MINUTE, topic="events")  # fmt: skip
    append(storage, model, 0, [b"a"] * 3, [b"new%d" % i for i in range(3)], ts=NOW, topic="events")
    (outcome,) = apply_retention(root, ["events"], now_ms=NOW).outcomes
    assert outcome.log_start_after == 5
    from sparklog.spark import register

    register(spark)

    def read(fail_on_data_loss: str) -> list[int]:
        df = (
            spark.read.format("sparklog")
            .option("subscribe", "events")
            .option("startingOffsets", '{"events": {"0": 0}}')
            .option("failOnDataLoss", fail_on_data_loss)
            .load(root)
        )
        return sorted(r.offset for r in df.select("offset").collect())

    with pytest.raises(Exception, match="offsets 0..4 were removed by retention"):
        read("true")
    assert read("false") == [5, 6, 7]


def test_aborted_records_go_markers_stay_and_open_transactions_are_not_cleaned(
    spark: Any, root: str
) -> None:
    from sparklog.storage.producers import ProducerBatch
    from sparklog.storage.records import make_records

    storage = _storage(root)
    log = storage.open_log(TOPIC, 0)
    ts = [NOW - 10 * MINUTE]
    log.append(make_records([b"v1"], keys=[b"k"], timestamps=ts))  # 0
    log.append(make_records([b"aborted"], keys=[b"k"], timestamps=ts),
               producer=ProducerBatch(5, 0, 0, 1, True))  # 1  # fmt: skip
    log.append_marker(5, 0, commit=False, coordinator_epoch=0)  # 2
    log.append(make_records([b"v2"], keys=[b"j"], timestamps=ts))  # 3
    log.roll()
    # 4: a transaction still open, in a sealed segment
    log.append(make_records([b"open"], keys=[b"j"], timestamps=ts),
               producer=ProducerBatch(6, 0, 0, 1, True))  # fmt: skip
    log.roll()
    log.append(make_records([b"tail"], keys=[b"x"], timestamps=ts))  # 5
    log.close()
    # markers carry the broker's clock: compact as of a moment after them
    compact(spark, root, [TOPIC], now_ms=int(time.time() * 1000) + MINUTE)
    view = storage.reader(TOPIC, 0).view()
    got = [(r["offset"], r["value"], r["attributes"])
           for b in view.batches(0) for r in b.to_pylist()]  # fmt: skip
    # offset 1 (aborted) is gone; the marker (2) stays; the segment holding the open
    # transaction's record (4) lies past the last stable offset and is not cleaned
    data = [(o, v) for o, v, a in got if not a & 0x20]
    assert data == [(0, b"v1"), (3, b"v2"), (4, b"open"), (5, b"tail")]
    assert [o for o, _, a in got if a & 0x20] == [2]
    assert [s.generation for s in manifest(storage).segments[:-1]] == [1, 0]
