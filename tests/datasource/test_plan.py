"""The read planner of batch and stream reads (``sparklog.datasource.plan``): pure driver
logic over real storage, no SparkSession."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan
from pyspark.sql.streaming.datasource import ReadAllAvailable

from sparklog.datasource.options import batch_options, stream_options
from sparklog.datasource.plan import Pushed, ReadPlanner
from sparklog.datasource.stream import SparkLogStreamReader
from sparklog.errors import OffsetOutOfRangeError, OptionError
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
        root, startingOffsets='{"t": {"0": 2, "1": -1}}', endingOffsets='{"t": {"0": 7}}'
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
