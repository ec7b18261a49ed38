"""The pure planners: which sealed segments retention deletes and compaction cleans, how
outputs are grouped and named, and when tombstones are due (no Spark, no files)."""

from __future__ import annotations

import itertools

import pytest

from sparklog.compaction import planner
from sparklog.storage import names
from sparklog.storage.config import TopicConfig
from sparklog.storage.manifest import NO_TIMESTAMP, CleanMark, Manifest, SegmentInfo

NOW = 10_000_000
DAY = 24 * 3600 * 1000


def seg(
    base: int,
    end: int | None,
    *,
    size: int = 100,
    max_ts: int = NOW - DAY,
    gen: int = 0,
    kind: names.SegmentKind = names.SEALED_KIND,
    tombstone: int | None = None,
) -> SegmentInfo:
    if end is None:
        kind = names.ACTIVE_KIND
    return SegmentInfo(
        names.segment_name(base, kind=kind, generation=gen),
        base,
        end,
        records=0 if end is None else end - base,
        size_bytes=size,
        max_timestamp=max_ts,
        first_tombstone=tombstone,
    )


def log(*segments: SegmentInfo, start: int = 0, cleaned: tuple[CleanMark, ...] = ()) -> Manifest:
    return Manifest(1, start, segments, cleaned=cleaned).validate()


def config(**kv: str) -> TopicConfig:
    return TopicConfig.from_mapping({k.replace("_", "."): v for k, v in kv.items()})


# ---------------------------------------------------------------------- retention


def test_retention_by_time_deletes_the_prefix_older_than_retention_ms() -> None:
    m = log(
        seg(0, 10, max_ts=NOW - 5000),
        seg(10, 20, max_ts=NOW - 3000),
        seg(20, 30, max_ts=NOW - 500),
        seg(30, None),
    )
    plan = planner.plan_retention(m, config(retention_ms="1000"), now_ms=NOW)
    assert [s.base_offset for s in plan.delete] == [0, 10]
    assert plan.reasons == ("retention.ms", "retention.ms")
    assert plan.log_start_offset == 20


def test_retention_by_time_stops_at_the_first_young_segment() -> None:
    """Kafka deletes a prefix only: an old segment behind a young one stays."""
    m = log(seg(0, 10, max_ts=NOW), seg(10, 20, max_ts=NOW - 10_000), seg(20, None))
    assert planner.plan_retention(m, config(retention_ms="1000"), now_ms=NOW).delete == ()


def test_retention_ms_minus_one_keeps_everything() -> None:
    m = log(seg(0, 10, max_ts=0), seg(10, None))
    assert planner.plan_retention(m, config(retention_ms="-1"), now_ms=NOW).delete == ()


def test_retention_by_bytes_counts_the_active_segment_and_never_goes_below_the_limit() -> None:
    """Kafka's rule: a segment goes only if what remains is still at least retention.bytes."""
    m = log(seg(0, 10, size=100), seg(10, 20, size=100), seg(20, 30, size=100), seg(30, None))
    cfg = config(retention_bytes="250", retention_ms="-1")
    plan = planner.plan_retention(m, cfg, now_ms=NOW, active_bytes=160)
    # 460 bytes in all: without two segments 260 remain, without three 160 (< 250)
    assert [s.base_offset for s in plan.delete] == [0, 10]
    assert plan.reasons == ("retention.bytes", "retention.bytes")
    assert plan.bytes == 200 and plan.records == 20
    assert planner.plan_retention(m, cfg, now_ms=NOW, active_bytes=60).delete == m.segments[:1]
    assert planner.plan_retention(m, cfg, now_ms=NOW, active_bytes=0).delete == ()


def test_retention_deletes_rolled_segments_sealed_or_not_but_never_the_active_one() -> None:
    """A rolled .arrow segment is as immutable as a sealed one: retention does not wait
    for the sealer."""
    m = log(seg(0, 10), seg(10, 20, kind=names.ACTIVE_KIND), seg(20, 30), seg(30, None))
    plan = planner.plan_retention(m, config(retention_ms="0"), now_ms=NOW, active_bytes=10**9)
    assert [s.base_offset for s in plan.delete] == [0, 10, 20]
    assert plan.log_start_offset == 30
    everything = planner.plan_retention(
        log(seg(0, None)), config(retention_ms="0", retention_bytes="0"), now_ms=NOW
    )
    assert everything.delete == ()


def test_retention_bytes_counts_unsealed_rolled_segments_by_their_file_size() -> None:
    m = log(
        seg(0, 10, size=500, kind=names.ACTIVE_KIND),
        seg(10, 20, size=500, kind=names.ACTIVE_KIND),
        seg(20, None),
    )
    plan = planner.plan_retention(m, config(retention_bytes="600", retention_ms="-1"),
                                  now_ms=NOW, active_bytes=100)  # fmt: skip
    assert [s.base_offset for s in plan.delete] == [0]
    assert plan.reasons == ("retention.bytes",) and plan.held == ()


def test_plan_says_why_an_active_segment_over_retention_bytes_stays() -> None:
    m = log(seg(0, 10, size=100), seg(10, None))
    cfg = config(retention_bytes="1000", retention_ms="-1", segment_bytes="1000000")
    plan = planner.plan_retention(m, cfg, now_ms=NOW, active_bytes=5000)
    assert [s.base_offset for s in plan.delete] == [0]
    (held,) = plan.held
    assert "active segment alone holds 5,000 bytes" in held and "segment.bytes 1,000,000" in held
    assert planner.plan_retention(m, cfg, now_ms=NOW, active_bytes=900).held == ()


def test_plan_says_when_a_young_segment_holds_back_expired_ones() -> None:
    m = log(seg(0, 10, max_ts=NOW), seg(10, 20, max_ts=NOW - 10_000), seg(20, None))
    plan = planner.plan_retention(m, config(retention_ms="1000"), now_ms=NOW)
    assert plan.delete == ()
    (held,) = plan.held
    assert "1 segment(s) past retention.ms wait behind" in held and names.segment_name(0) in held


def test_nothing_is_held_on_a_compact_only_topic() -> None:
    m = log(seg(0, 10, max_ts=NOW), seg(10, 20, max_ts=0), seg(20, None))
    cfg = config(cleanup_policy="compact", retention_ms="1000", retention_bytes="1")
    assert planner.plan_retention(m, cfg, now_ms=NOW, active_bytes=10**6).held == ()


def test_retention_deletes_segments_below_a_log_start_moved_by_delete_records() -> None:
    m = log(seg(0, 10, max_ts=NOW), seg(10, 20, max_ts=NOW), seg(20, None), start=15)
    plan = planner.plan_retention(m, config(retention_ms="-1"), now_ms=NOW)
    assert [s.base_offset for s in plan.delete] == [0]
    assert plan.reasons == (planner.REASON_LOG_START,)
    assert plan.log_start_offset == 15


def test_compact_only_topic_keeps_old_segments_but_drops_those_below_the_log_start() -> None:
    m = log(seg(0, 10, max_ts=0), seg(10, 20, max_ts=0), seg(20, None), start=10)
    cfg = config(cleanup_policy="compact", retention_ms="1", retention_bytes="1")
    plan = planner.plan_retention(m, cfg, now_ms=NOW)
    assert [s.base_offset for s in plan.delete] == [0]


def test_retention_with_nothing_to_delete_keeps_the_log_start() -> None:
    m = log(seg(0, 10), seg(10, None), start=3)
    plan = planner.plan_retention(m, config(), now_ms=NOW)
    assert plan.delete == () and plan.log_start_offset == 3


# ---------------------------------------------------------------------- compaction section


def compact(**kv: str) -> TopicConfig:
    return config(cleanup_policy="compact", **kv)


def test_section_is_the_sealed_prefix_up_to_the_first_segment_within_min_lag() -> None:
    m = log(
        seg(0, 10, max_ts=NOW - 5000),
        seg(10, 20, max_ts=NOW - 100),
        seg(20, 30, max_ts=NOW - 5000),
        seg(30, None),
    )
    plan = planner.plan_compaction(m, compact(min_compaction_lag_ms="1000"), now_ms=NOW)
    assert [s.base_offset for s in plan.section] == [0]
    assert plan.end_offset == 10
    whole = planner.plan_compaction(m, compact(), now_ms=NOW)
    assert [s.base_offset for s in whole.section] == [0, 10, 20]


def test_section_never_includes_a_rolled_segment_awaiting_its_seal() -> None:
    m = log(seg(0, 10), seg(10, 20, kind=names.ACTIVE_KIND), seg(20, 30), seg(30, None))
    plan = planner.plan_compaction(m, compact(), now_ms=NOW)
    assert [s.base_offset for s in plan.section] == [0]


def test_section_skips_segments_wholly_below_the_log_start() -> None:
    m = log(seg(0, 10), seg(10, 20), seg(20, None), start=12)
    plan = planner.plan_compaction(m, compact(), now_ms=NOW)
    assert [s.base_offset for s in plan.section] == [10]


def test_delete_only_topic_is_never_compacted() -> None:
    plan = planner.plan_compaction(log(seg(0, 10), seg(10, None)), config(), now_ms=NOW)
    assert not plan.worth_cleaning and plan.section == ()
    assert "cleanup.policy" in plan.reason


def test_nothing_old_enough_is_nothing_to_do() -> None:
    m = log(seg(0, 10, max_ts=NOW), seg(10, None))
    plan = planner.plan_compaction(m, compact(min_compaction_lag_ms="60000"), now_ms=NOW)
    assert not plan.worth_cleaning
    assert "min.compaction.lag.ms" in plan.reason


def test_a_log_with_only_its_active_segment_says_so() -> None:
    plan = planner.plan_compaction(log(seg(0, None)), compact(), now_ms=NOW)
    assert not plan.worth_cleaning
    assert plan.reason.startswith("no sealed segment yet")


# ---------------------------------------------------------------------- dirty ratio


def test_dirty_ratio_is_dirty_bytes_over_section_bytes() -> None:
    m = log(seg(0, 10, size=300, gen=2), seg(10, 20, size=100), seg(20, None))
    plan = planner.plan_compaction(m, compact(min_cleanable_dirty_ratio="0.25"), now_ms=NOW)
    assert (plan.clean_bytes, plan.dirty_bytes, plan.dirty_segments) == (300, 100, 1)
    assert plan.dirty_ratio == pytest.approx(0.25)
    assert plan.worth_cleaning


def test_partition_below_the_min_cleanable_dirty_ratio_is_skipped() -> None:
    m = log(seg(0, 10, size=300, gen=2), seg(10, 20, size=100), seg(20, None))
    plan = planner.plan_compaction(m, compact(min_cleanable_dirty_ratio="0.3"), now_ms=NOW)
    assert not plan.worth_cleaning
    assert "0.25 < min.cleanable.dirty.ratio 0.3" in plan.reason


def test_a_fully_clean_section_is_not_rewritten() -> None:
    m = log(seg(0, 10, gen=1), seg(10, 20, gen=3), seg(20, None))
    plan = planner.plan_compaction(m, compact(min_cleanable_dirty_ratio="0"), now_ms=NOW)
    assert not plan.worth_cleaning and plan.reason == "nothing dirty"


# ---------------------------------------------------------------------- tombstones


def test_clean_segment_with_an_expired_tombstone_is_cleaned_without_dirty_data() -> None:
    marks = (CleanMark(20, NOW - 2000),)
    m = log(seg(0, 20, gen=1, tombstone=7), seg(20, None), cleaned=marks)
    plan = planner.plan_compaction(m, compact(delete_retention_ms="1000"), now_ms=NOW)
    assert plan.tombstones_below == 20
    assert plan.worth_cleaning and plan.tombstones_due
    assert plan.reason == "tombstones past delete.retention.ms"


def test_tombstones_not_yet_expired_do_not_trigger_a_rewrite() -> None:
    marks = (CleanMark(20, NOW - 500),)
    m = log(seg(0, 20, gen=1, tombstone=7), seg(20, None), cleaned=marks)
    plan = planner.plan_compaction(m, compact(delete_retention_ms="1000"), now_ms=NOW)
    assert plan.tombstones_below == 0 and not plan.worth_cleaning


def test_a_tombstone_above_the_horizon_does_not_trigger_a_rewrite() -> None:
    marks = (CleanMark(10, NOW - 5000), CleanMark(20, NOW))
    m = log(seg(0, 20, gen=1, tombstone=15), seg(20, None), cleaned=marks)
    plan = planner.plan_compaction(m, compact(delete_retention_ms="1000"), now_ms=NOW)
    assert plan.tombstones_below == 10 and not plan.tombstones_due


# ---------------------------------------------------------------------- output groups


def test_groups_fill_up_to_segment_bytes_by_the_estimated_output() -> None:
    section = [seg(0, 100, size=1000), seg(100, 200, size=1000), seg(200, 300, size=1000)]
    kept = {section[0].name: 50, section[1].name: 50, section[2].name: 100}
    groups = planner.plan_groups(section, kept, segment_bytes=1000)
    assert [[s.base_offset for s in g.inputs] for g in groups] == [[0, 100], [200]]
    assert [g.estimated_bytes for g in groups] == [1000, 1000]
    assert [(g.base_offset, g.next_offset) for g in groups] == [(0, 200), (200, 300)]


def test_segments_keeping_nothing_join_a_neighbour_so_no_output_is_empty() -> None:
    section = [seg(0, 10, size=10**6), seg(10, 20, size=10**6), seg(20, 30, size=10**6)]
    groups = planner.plan_groups(section, {section[1].name: 10}, segment_bytes=100)
    assert len(groups) == 1
    assert (groups[0].base_offset, groups[0].next_offset) == (0, 30)


def test_outputs_cover_the_section_exactly_and_contiguously() -> None:
    section = [seg(i * 10, i * 10 + 10, size=500) for i in range(7)]
    kept = {s.name: (s.base_offset // 10) % 3 * 4 for s in section}
    groups = planner.plan_groups(section, kept, segment_bytes=450)
    assert groups[0].base_offset == 0 and groups[-1].next_offset == 70
    for a, b in itertools.pairwise(groups):
        assert a.next_offset == b.base_offset
    assert [s for g in groups for s in g.inputs] == section


def test_output_names_are_new_generations_of_the_first_input() -> None:
    section = [seg(0, 10, gen=3), seg(10, 20)]
    on_disk = [names.segment_name(0, generation=5), names.segment_name(10, generation=9)]
    (group,) = planner.plan_groups(
        section, {s.name: 1 for s in section}, segment_bytes=10**9, on_disk=on_disk
    )
    assert group.name == names.segment_name(0, generation=6)
    assert planner.next_generation(10, [], []) == 1


def test_generations_run_out_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="generations exhausted"):
        planner.next_generation(0, [seg(0, 10, gen=planner.MAX_GENERATION)], [])


def test_empty_segment_counts_as_old_enough() -> None:
    m = log(seg(0, 10, max_ts=NO_TIMESTAMP), seg(10, None))
    cfg = compact(min_compaction_lag_ms=str(DAY))
    assert [s.base_offset for s in planner.plan_compaction(m, cfg, now_ms=NOW).section] == [0]
