"""The read planner of batch and stream reads (``sparklog.datasource.plan``): pure driver
logic over real storage, no SparkSession."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan
from pyspark.sql.streaming.datasource import ReadAllAvailable

from sparklog.datasource.options.reads import batch_options, stream_options
from sparklog.datasource.plan import Pushed, ReadPlanner
from sparklog.datasource.stream import SparkLogStreamReader
from sparklog.errors import NoStorageError, OffsetOutOfRangeError, OptionError
from sparklog.storage import Storage
from sparklog.storage.records import make_records

T0 = 1_700_000_000_000


def _write(root: str, topic: str, partition: int, n: int, first: int = 0) -> None:
    storage = Storage(root)
    if not storage.topics.exists(topic):
        storage.topics.create(topic, 2)
    log = storage.open_log(topic, partition)
    log.append(
        make_records(
            [b"v%d" % i for i in range(first, first + n)],
            timestamps=[T0 + 1000 * i for i in range(first, first + n)],
        )
    )
    log.close()


@pytest.fixture
def root(tmp_path: Path) -> str:
    r = str(tmp_path / "data")
    _write(r, "t", 0, 10)
    _write(r, "t", 1, 3)
    return r


def _planner(root: str, **options: str) -> tuple[ReadPlanner, object]:
    o = batch_options({"path": root, "subscribe": "t", **options})
    return ReadPlanner.of(o), o


def test_every_partition_is_split_at_max_records_per_partition(root: str) -> None:
    planner, o = _planner(root, maxRecordsPerPartition="4")
    spans = planner.batch_spans(o)  # type: ignore[arg-type]
    ranges = planner.split({tp: (s, e) for tp, (s, e, _) in spans.items()})
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, 4), (0, 4, 8), (0, 8, 10), (1, 0, 3),
    ]  # fmt: skip


def test_starting_and_ending_offsets_are_resolved_per_partition(root: str) -> None:
    planner, o = _planner(
        root, startingOffsets='{"t": {"0": 2, "1": 3}}', endingOffsets='{"t": {"0": 7}}'
    )
    spans = planner.batch_spans(o)  # type: ignore[arg-type]
    assert {tp: (s, e) for tp, (s, e, _) in spans.items()} == {("t", 0): (2, 7), ("t", 1): (3, 3)}


def test_pushed_filters_narrow_partitions_offsets_and_the_start_time(root: str) -> None:
    planner, o = _planner(root)
    pushed = Pushed()
    for f in (
        In(("partition",), (0,)),
        LessThan(("offset",), 9),
        GreaterThanOrEqual(("timestamp",), datetime.datetime.fromtimestamp((T0 + 3000) / 1000)),
    ):
        pushed.add(f)
    spans = planner.batch_spans(o, pushed)  # type: ignore[arg-type]
    assert {tp: (s, e) for tp, (s, e, _) in spans.items()} == {("t", 0): (3, 9)}
    only = Pushed()
    only.add(EqualTo(("partition",), 1))
    assert list(planner.batch_spans(o, only)) == [("t", 1)]  # type: ignore[arg-type]


def test_offsets_removed_by_retention_fail_or_are_skipped(root: str) -> None:
    log = Storage(root).open_log("t", 0)
    log.delete_records(4)
    log.close()
    planner, o = _planner(root, startingOffsets='{"t": {"0": 1}}')
    with pytest.raises(OffsetOutOfRangeError, match=r"t-0: offsets 1\.\.3 were removed"):
        planner.batch_spans(o)  # type: ignore[arg-type]
    planner, o = _planner(root, startingOffsets='{"t": {"0": 1}}', failOnDataLoss="false")
    assert planner.batch_spans(o)[("t", 0)][:2] == (4, 10)  # type: ignore[arg-type]


def test_a_path_without_storage_is_named(tmp_path: Path) -> None:
    planner = ReadPlanner.of(batch_options({"path": str(tmp_path / "x"), "subscribe": "t"}))
    with pytest.raises(NoStorageError, match=f"{tmp_path / 'x'}: no sparklog storage here"):
        planner.snapshot()


def test_an_unknown_subscribed_topic_names_the_option(root: str) -> None:
    planner, _ = _planner(root)
    planner.subscription = batch_options({"path": root, "subscribe": "nope"}).subscription
    with pytest.raises(OptionError, match="subscribe"):
        planner.snapshot()


def test_a_pattern_and_an_assignment_resolve_to_their_partitions(root: str) -> None:
    _write(root, "tx", 0, 1)
    by_pattern = ReadPlanner.of(batch_options({"path": root, "subscribePattern": "t.*"}))
    assert sorted(by_pattern.snapshot()) == [("t", 0), ("t", 1), ("tx", 0), ("tx", 1)]
    assigned = ReadPlanner.of(batch_options({"path": root, "assign": '{"tx": [1]}'}))
    assert list(assigned.snapshot()) == [("tx", 1)]


def _stream(root: str, **options: str) -> SparkLogStreamReader:
    return SparkLogStreamReader(
        stream_options({"path": root, "subscribe": "t", "startingOffsets": "earliest", **options})
    )


def test_a_micro_batch_is_planned_on_the_bounds_its_latest_offset_read(root: str) -> None:
    reader = _stream(root)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    log = Storage(root).open_log("t", 0)
    log.delete_records(6)  # after latestOffset planned the batch: the read itself sees it
    log.close()
    ranges = reader.partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 10), (1, 0, 3)]


def test_a_replayed_micro_batch_checks_its_start_against_the_log_start(root: str) -> None:
    log = Storage(root).open_log("t", 0)
    log.delete_records(6)
    log.close()
    start, end = {"t": {"0": 2, "1": 0}}, {"t": {"0": 10, "1": 3}}
    with pytest.raises(OffsetOutOfRangeError, match=r"t-0: offsets 2\.\.5"):
        _stream(root).partitions(start, end)  # a new reader: as after a restart
    skipped = _stream(root, failOnDataLoss="false").partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in skipped] == [(0, 6, 10), (1, 0, 3)]


def test_a_partition_new_in_a_micro_batch_starts_at_its_log_start(root: str) -> None:
    log = Storage(root).open_log("t", 1)
    log.delete_records(2)
    log.close()
    reader = _stream(root)
    start = {"t": {"0": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 3}}
    ranges = reader.partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 10), (1, 2, 3)]


# ---------------------------------------------------------------------- offsets a user gets wrong


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": '{"t": {"0": 50}}'},
         r"startingOffsets: t-0 offset 50 is past the latest offset 10"),
        ({"endingOffsets": '{"t": {"1": 9}}'},
         r"endingOffsets: t-1 offset 9 is past the latest offset 3"),
        ({"startingOffsets": '{"t": {"0": 8}}', "endingOffsets": '{"t": {"0": 5}}'},
         r"t-0: the starting offset 8 is after the ending offset 5"),
        ({"startingOffsets": '{"t": {"7": 0}}'},
         r"startingOffsets names t-7, which subscribe=t does not cover"),
        ({"startingOffsets": '{"nope": {"0": 0}}'}, r"startingOffsets names nope-0"),
    ],
)  # fmt: skip
def test_batch_offsets_a_user_got_wrong_are_errors_naming_them(
    root: str, options: dict[str, str], message: str
) -> None:
    planner, o = _planner(root, **options)
    with pytest.raises(OptionError, match=message):
        planner.batch_spans(o)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": '{"t": {"0": -5}}'}, r"startingOffsets: t-0: -5 is not an offset"),
        ({"endingOffsets": '{"t": {"0": -3}}'}, r"endingOffsets: t-0: -3 is not an offset"),
        ({"startingOffsets": '{"t": {"0": -1}}'}, r"startingOffsets: t-0: -1 \(latest"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, r"endingOffsets: t-0: -2 \(earliest"),
        ({"startingOffsets": "latest"}, r"startingOffsets=latest"),
    ],
)  # fmt: skip
def test_batch_offsets_that_are_no_offsets_are_option_errors(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        batch_options({"path": "/x", "subscribe": "t", **options})


def test_a_negative_stream_offset_is_an_option_error() -> None:
    with pytest.raises(OptionError, match=r"t-0: -7 is not an offset"):
        stream_options({"path": "/x", "subscribe": "t", "startingOffsets": '{"t": {"0": -7}}'})


def test_stream_starting_offsets_past_the_end_or_unsubscribed_fail_at_start(root: str) -> None:
    with pytest.raises(OptionError, match="t-0 offset 11 is past the latest offset 10"):
        _stream(root, startingOffsets='{"t": {"0": 11}}').initialOffset()
    with pytest.raises(OptionError, match="names x-0, which subscribe=t does not cover"):
        _stream(root, startingOffsets='{"x": {"0": 0}}').initialOffset()


# ---------------------------------------------------------------------- deleted topics


def _delete(root: str, topic: str) -> None:
    Storage(root).topics.delete(topic)


def test_a_topic_deleted_under_a_stream_is_skipped_with_a_warning(
    root: str, caplog: pytest.LogCaptureFixture
) -> None:
    _write(root, "u", 0, 4)
    reader = _stream(root, subscribe="t,u", failOnDataLoss="false")
    start = reader.initialOffset()
    _delete(root, "u")
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 3}}
    assert "topic 'u' was deleted while the query ran" in caplog.text
    assert [(r.topic, r.partition) for r in reader.partitions(start, end)] == [("t", 0), ("t", 1)]


def test_a_topic_deleted_under_a_stream_fails_it_naming_the_deletion(root: str) -> None:
    _write(root, "u", 0, 4)
    reader = _stream(root, subscribe="t,u")
    start = reader.initialOffset()
    _delete(root, "u")
    with pytest.raises(OffsetOutOfRangeError, match="topic 'u' was deleted while the query ran"):
        reader.latestOffset(start, ReadAllAvailable())


def test_a_recreated_topic_is_read_from_its_start(root: str) -> None:
    reader = _stream(root, failOnDataLoss="false")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())  # {t-0: 10, t-1: 3}
    _delete(root, "t")
    _write(root, "t", 0, 12)  # more records than before: only the topic id tells
    nxt = reader.latestOffset(end, ReadAllAvailable())
    assert nxt == {"t": {"0": 12, "1": 0}}
    ranges = reader.partitions(end, nxt)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 12)]


def test_offsets_that_went_back_after_a_restart_are_data_loss(root: str) -> None:
    start = {"t": {"0": 10, "1": 3}}
    _delete(root, "t")
    _write(root, "t", 0, 2)
    with pytest.raises(OffsetOutOfRangeError, match=r"t-0: the topic was deleted and created"):
        _stream(root).latestOffset(start, ReadAllAvailable())
    reader = _stream(root, failOnDataLoss="false")
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 2, "1": 0}}


# ---------------------------------------------------------------------- data loss is told


def test_data_loss_a_stream_skips_is_warned_and_reported_in_its_progress(
    root: str, caplog: pytest.LogCaptureFixture
) -> None:
    reader = _stream(root, failOnDataLoss="false")
    start = reader.initialOffset()
    log = Storage(root).open_log("t", 0)
    log.delete_records(7)
    log.close()
    end = reader.latestOffset(start, ReadAllAvailable())
    ranges = reader.partitions(start, end)
    assert [(r.partition, r.start) for r in ranges] == [(0, 7), (1, 0)]
    assert "t-0: offsets 0..6 were removed by retention" in caplog.text
    report = reader.reportLatestOffset()
    assert report["sparklog:source"] == {"dataLossEvents": 1, "offsetsSkipped": 7}


def test_a_task_that_finds_offsets_gone_warns(root: str, caplog: pytest.LogCaptureFixture) -> None:
    from sparklog.datasource.scan import OffsetRange, read_range

    log = Storage(root).open_log("t", 0)
    log.delete_records(4)
    log.close()
    rows = sum(b.num_rows for b in read_range(OffsetRange(root, "t", 0, 1, 10, False, False)))
    assert rows == 6
    assert "t-0: offsets 1..3 were removed while the query ran" in caplog.text
