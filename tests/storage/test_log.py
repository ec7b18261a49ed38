from __future__ import annotations

import itertools
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparklog.errors import InvalidRecordsError, OffsetOutOfRangeError, RecordTooLargeError
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import LOG_APPEND_TIME, RECORD_SCHEMA, make_records

from .helpers import offsets, open_log, records, values


def test_append_assigns_dense_offsets(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    first = log.append(records(0, 3))
    second = log.append(records(3, 2))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert log.high_watermark == log.log_end_offset == 5
    assert offsets(log.batches(0)) == [0, 1, 2, 3, 4]


def test_read_returns_the_stored_columns(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(
        make_records(
            [b"a", None, b"c"],
            keys=[b"k", None, b"k"],
            timestamps=[10, 20, 30],
            headers=[[("h", b"1"), ("n", None)], [], [("x", b"")]],
        )
    )
    [batch] = log.read(0)
    assert batch.schema.equals(RECORD_SCHEMA)
    assert batch.to_pylist()[0]["headers"] == [
        {"key": "h", "value": b"1"},
        {"key": "n", "value": None},
    ]
    assert batch.column("value").to_pylist() == [b"a", None, b"c"]
    assert batch.column("key").to_pylist() == [b"k", None, b"k"]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [10, 20, 30]


def test_read_from_the_middle_of_a_batch(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    assert values(log.read(7)) == [b"v7", b"v8", b"v9"]


def test_read_honours_max_bytes_but_returns_at_least_one_record(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    for i in range(10):
        log.append(records(i * 100, 100))
    small = log.read(0, max_bytes=1)
    assert sum(b.num_rows for b in small) == 1
    some = log.read(0, max_bytes=20_000)
    n = sum(b.num_rows for b in some)
    assert 1 < n < 1000
    assert sum(b.nbytes for b in some) <= 20_000
    assert offsets(some) == list(range(n))


def test_read_at_the_high_watermark_is_empty(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 3))
    assert log.read(3) == []


@pytest.mark.parametrize("offset", [-1, 4])
def test_read_outside_the_log_raises(fs: LocalFileSystem, root: str, offset: int) -> None:
    log = open_log(fs, root)
    log.append(records(0, 3))
    with pytest.raises(OffsetOutOfRangeError, match="t-0"):
        log.read(offset)


def test_batches_stop_at_end_offset(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    log.append(records(10, 10))
    assert offsets(log.batches(5, 12)) == list(range(5, 12))


def test_empty_batch_is_rejected(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    with pytest.raises(InvalidRecordsError, match="empty"):
        log.append(make_records([]))
    assert log.log_end_offset == 0


def test_unknown_column_is_rejected(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    bad = pa.RecordBatch.from_pydict({"value": [b"x"], "offset": [5]})
    with pytest.raises(InvalidRecordsError, match="offset"):
        log.append(bad)


def test_wrong_column_type_is_rejected(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    bad = pa.RecordBatch.from_pydict({"value": pa.array([[1]], pa.list_(pa.int64()))})
    with pytest.raises(InvalidRecordsError, match="value"):
        log.append(bad)


def test_oversized_batch_is_rejected_and_nothing_is_written(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, max_message_bytes=1000)
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append(make_records([b"x" * 2000]))
    assert log.log_end_offset == 0
    log.append(make_records([b"ok"]))
    assert values(log.read(0)) == [b"ok"]


def test_log_append_time_overrides_producer_timestamps(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, message_timestamp_type="LogAppendTime")
    result = log.append(make_records([b"a"], timestamps=[5]))
    [batch] = log.read(0)
    assert batch.column("timestamp_type").to_pylist() == [LOG_APPEND_TIME]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [result.log_append_time_ms]
    assert result.log_append_time_ms > 5


def test_segment_rolls_by_size_and_seals_to_parquet(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, segment_bytes=4096)
    for i in range(20):
        log.append(records(i * 10, 10))
    log.wait_sealed()
    segments = log.manifest.segments
    assert len(segments) > 2
    assert all(s.sealed for s in segments[:-1])
    assert not segments[-1].sealed
    for prev, nxt in itertools.pairwise(segments):
        assert prev.next_offset == nxt.base_offset
    assert values(log.batches(0)) == [b"v%d" % i for i in range(200)]


def test_segment_rolls_by_age(fs: LocalFileSystem, root: str) -> None:
    now = [1000.0]
    config = TopicConfig.from_mapping({"segment.ms": "60000"})
    log = PartitionLog.open(fs, root, "t", 0, config, clock=lambda: now[0])
    log.append(records(0, 5))
    now[0] += 59
    log.append(records(5, 5))
    assert len(log.manifest.segments) == 1
    now[0] += 2
    log.append(records(10, 5))
    log.wait_sealed()
    assert [s.base_offset for s in log.manifest.segments] == [0, 10]
    assert log.manifest.segments[0].sealed


def test_appends_continue_while_a_rolled_segment_awaits_sealing(
    fs: LocalFileSystem, root: str
) -> None:
    log = PartitionLog.open(fs, root, "t", 0, TopicConfig(), auto_seal=False)
    log.append(records(0, 10))
    log.roll()
    log.append(records(10, 10))
    assert [s.sealed for s in log.manifest.segments] == [False, False]
    assert values(log.batches(5, 15)) == [b"v%d" % i for i in range(5, 15)]
    assert values(PartitionReader(fs, root, "t", 0).view().batches(0)) == values(log.batches(0))
    assert log.seal_pending() == ["00000000000000000000.parquet"]
    assert values(log.batches(0)) == [b"v%d" % i for i in range(20)]


def test_empty_active_segment_does_not_roll(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.roll()
    assert len(log.manifest.segments) == 1


def test_sealed_segment_is_plain_zstd_parquet_with_statistics(
    fs: LocalFileSystem, root: str
) -> None:
    log = PartitionLog.open(fs, root, "t", 0, TopicConfig(), row_group_rows=40)
    log.append(records(0, 100))
    log.roll()
    sealed = log.manifest.segments[0]
    path = f"{log.path}/{sealed.name}"
    table = pq.read_table(path)
    assert table.schema.equals(RECORD_SCHEMA)
    assert table.column("offset").to_pylist() == list(range(100))
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups == 3
    rg = md.row_group(1)
    names = [rg.column(i).path_in_schema for i in range(rg.num_columns)]
    off = rg.column(names.index("offset"))
    ts = rg.column(names.index("timestamp"))
    assert (off.statistics.min, off.statistics.max) == (40, 79)
    assert ts.statistics.has_min_max
    assert off.compression == "ZSTD"
    assert sealed.records == 100 and sealed.size_bytes == fs.size(path)
    assert (sealed.min_timestamp, sealed.max_timestamp) == (1_000_000, 1_000_099)


def test_reads_span_sealed_and_active_segments(fs: LocalFileSystem, root: str) -> None:
    log = PartitionLog.open(fs, root, "t", 0, TopicConfig(), row_group_rows=16)
    log.append(records(0, 50))
    log.roll()
    log.append(records(50, 50))
    assert offsets(log.batches(33, 77)) == list(range(33, 77))
    assert values(log.read(45, max_bytes=10**9)) == [b"v%d" % i for i in range(45, 100)]


def test_reopen_continues_where_it_left_off(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, segment_bytes=4096)
    for i in range(10):
        log.append(records(i * 10, 10))
    log.close()
    log = open_log(fs, root, segment_bytes=4096)
    assert log.high_watermark == 100
    assert log.append(records(100, 1)).base_offset == 100
    assert values(log.batches(0)) == [b"v%d" % i for i in range(101)]
    assert log.recovery.truncated_bytes == 0


def test_offset_for_timestamp_finds_the_earliest_at_or_after(
    fs: LocalFileSystem, root: str
) -> None:
    log = PartitionLog.open(fs, root, "t", 0, TopicConfig(), row_group_rows=4)
    log.append(make_records([b"a", b"b", b"c"], timestamps=[100, 300, 200]))
    log.roll()
    log.append(make_records([b"d", b"e"], timestamps=[250, 500]))
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(100) == 0
    assert log.offset_for_timestamp(101) == 1
    assert log.offset_for_timestamp(250) == 1
    assert log.offset_for_timestamp(301) == 4
    assert log.offset_for_timestamp(501) is None


def test_offset_for_timestamp_skips_deleted_records(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(make_records([b"a", b"b", b"c"], timestamps=[100, 200, 300]))
    log.delete_records(2)
    assert log.offset_for_timestamp(0) == 2


def test_delete_records_advances_the_log_start(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 10))
    assert log.delete_records(4) == 4
    assert log.delete_records(2) == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3)
    assert offsets(log.batches(4)) == list(range(4, 10))
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(11)


def test_non_durable_appends_are_invisible_until_sync(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    log.append(records(0, 2))
    log.append(records(2, 3), durable=False)
    assert log.high_watermark == 2
    assert log.log_end_offset == 5
    assert offsets(log.batches(0)) == [0, 1]
    assert PartitionReader(fs, root, "t", 0).view().high_watermark == 2
    log.sync()
    assert PartitionReader(fs, root, "t", 0).view().high_watermark == 5


def test_one_fsync_serves_many_waiting_appends(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(50):
                log.append(records(w * 1000 + i, 1))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert log.high_watermark == 400
    assert log.fsync_count < 400
    assert sorted(values(log.batches(0))) == sorted(
        b"v%d" % (w * 1000 + i) for w in range(8) for i in range(50)
    )


def test_out_of_process_reader_sees_what_the_log_sees(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, segment_bytes=4096)
    for i in range(12):
        log.append(records(i * 10, 10))
    view = PartitionReader(fs, root, "t", 0).view()
    assert view.high_watermark == 120
    assert values(view.batches(0)) == values(log.batches(0))
    assert view.offset_for_timestamp(1_000_050) == 50


def test_leader_epoch_bumps_survive_reopen(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    assert log.bump_leader_epoch() == 0
    log.append(records(0, 3))
    log.close()
    log = open_log(fs, root)
    assert log.bump_leader_epoch() == 1
    assert log.epochs.leader_epochs() == [(0, 0), (1, 3)]


def test_closed_log_refuses_appends(fs: LocalFileSystem, root: str) -> None:
    from sparklog.errors import LogClosedError

    log = open_log(fs, root)
    log.close()
    with pytest.raises(LogClosedError):
        log.append(records(0, 1))


def test_a_partition_never_opened_reads_as_an_empty_log(fs: LocalFileSystem, root: str) -> None:
    view = PartitionReader(fs, root, "t", 3).view()
    assert (view.log_start_offset, view.high_watermark) == (0, 0)
    assert list(view.batches(0)) == []
    assert view.offset_for_timestamp(0) is None
    with pytest.raises(OffsetOutOfRangeError):
        view.read(1)


def test_an_append_reports_that_it_rolled_the_segment(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, segment_bytes=4096)
    rolled = [log.append(records(i * 10, 10)).rolled for i in range(12)]
    assert not rolled[0] and any(rolled)
    assert sum(rolled) == len(log.manifest.segments) - 1
