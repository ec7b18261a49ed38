"""spark.read.format("sparklog"): the Kafka source's columns and options over storage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sparklog.spark
from sparklog.datasource.options.reads import batch_options
from sparklog.errors import OptionError
from sparklog.storage import Storage
from sparklog.storage.records import make_records

pytestmark = pytest.mark.spark


@pytest.fixture
def data(tmp_path: Path) -> str:
    """Topic "events": 2 partitions; p0 has 30 records over a sealed and an active segment,
    p1 has 5. Topic "other": 1 partition, 3 records."""
    root = str(tmp_path / "data")
    storage = Storage(root)
    storage.topics.create("events", 2)
    storage.topics.create("other", 1)
    p0 = storage.open_log("events", 0, row_group_rows=7)
    p0.append(make_records([b"a%d" % i for i in range(20)], keys=[b"k%d" % (i % 3) for i in
              range(20)], timestamps=[1_700_000_000_000 + i for i in range(20)],
              headers=[[("h", b"%d" % i)] for i in range(20)]))  # fmt: skip
    p0.roll()
    p0.append(make_records([b"a%d" % i for i in range(20, 30)],
                           timestamps=[1_700_000_000_000 + i for i in range(20, 30)]))  # fmt: skip
    p0.close()
    p1 = storage.open_log("events", 1)
    p1.append(make_records([b"b%d" % i for i in range(5)]))
    p1.close()
    other = storage.open_log("other", 0)
    other.append(make_records([b"o0", b"o1", b"o2"]))
    other.close()
    return root


@pytest.fixture
def read(spark: Any, data: str) -> Any:
    sparklog.spark.register(spark)

    def reader(**options: str) -> Any:
        r = spark.read.format("sparklog")
        for k, v in options.items():
            r = r.option(k, v)
        return r.load(data)

    return reader


def test_columns_are_the_kafka_sources(read: Any) -> None:
    df = read(subscribe="events")
    assert df.dtypes == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
    ]  # fmt: skip


def test_reads_every_record_of_a_subscription(read: Any) -> None:
    rows = read(subscribe="events").select("partition", "offset", "value").collect()
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    assert got == [(0, i, b"a%d" % i) for i in range(30)] + [(1, i, b"b%d" % i) for i in range(5)]


def test_small_spark_partitions_split_a_range(read: Any) -> None:
    df = read(subscribe="events", maxRecordsPerPartition="4")
    assert df.rdd.getNumPartitions() == 8 + 2
    assert df.count() == 35


def test_headers_with_include_headers(read: Any) -> None:
    df = read(subscribe="events", includeHeaders="true").where("partition = 0 and offset = 3")
    [row] = df.collect()
    assert row.headers[0].key == "h" and bytes(row.headers[0].value) == b"3"


def test_timestamps_are_exact(read: Any, spark: Any) -> None:
    row = read(subscribe="events").where("partition = 0 and offset = 25").collect()[0]
    assert int(row.timestamp.timestamp() * 1000) == 1_700_000_000_025
    assert row.timestampType == 0


def test_offset_ranges_as_json(read: Any) -> None:
    df = read(
        subscribe="events",
        startingOffsets=json.dumps({"events": {"0": 18, "1": -2}}),
        endingOffsets=json.dumps({"events": {"0": 22, "1": 2}}),
    )
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, 18), (0, 19), (0, 20), (0, 21), (1, 0), (1, 1)]


def test_starting_timestamp(read: Any) -> None:
    df = read(assign=json.dumps({"events": [0]}), startingTimestamp="1700000000027")
    assert sorted(r.offset for r in df.collect()) == [27, 28, 29]


def test_starting_offsets_by_timestamp_per_partition(read: Any) -> None:
    df = read(subscribe="events",
              startingOffsetsByTimestamp=json.dumps({"events": {"0": 1700000000025}}))  # fmt: skip
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, 25), (0, 26), (0, 27), (0, 28), (0, 29)] + [(1, i) for i in range(5)]


def test_ending_timestamp_is_an_exclusive_end(read: Any) -> None:
    df = read(assign=json.dumps({"events": [0]}), endingTimestamp="1700000000003")
    assert sorted(r.offset for r in df.collect()) == [0, 1, 2]
    df = read(assign=json.dumps({"events": [0]}),
              endingOffsetsByTimestamp=json.dumps({"events": {"0": 1700000000002}}))  # fmt: skip
    assert sorted(r.offset for r in df.collect()) == [0, 1]


def test_a_starting_time_after_every_record_fails_or_starts_at_latest(read: Any) -> None:
    late = {"assign": json.dumps({"events": [0]}), "startingTimestamp": "1800000000000"}
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        read(**late).collect()
    assert read(**late, startingOffsetsByTimestampStrategy="latest").count() == 0


def test_subscribe_pattern(read: Any) -> None:
    topics = {r.topic for r in read(subscribePattern="oth.*").collect()}
    assert topics == {"other"}


def test_a_latest_start_is_an_error_for_a_batch_read(read: Any) -> None:
    # Spark's Kafka source refuses it too: a batch from the latest offset reads nothing
    with pytest.raises(Exception, match="startingOffsets=latest"):
        read(subscribe="events", startingOffsets="latest").count()


def test_data_loss_fails_or_warns(read: Any, data: str) -> None:
    log = Storage(data).open_log("other", 0)
    log.delete_records(2)
    log.close()
    with pytest.raises(Exception, match="removed by retention"):
        read(subscribe="other", startingOffsets=json.dumps({"other": {"0": 0}})).collect()
    rows = read(subscribe="other", startingOffsets=json.dumps({"other": {"0": 0}}),
                failOnDataLoss="false").collect()  # fmt: skip
    assert [r.offset for r in rows] == [2]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "events", "startingOffest": "earliest"}, "startingoffest"),
        ({}, "exactly one of the options subscribe"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one"),
        ({"subscribe": "events", "startingOffsets": "soon"}, "startingOffsets"),
        ({"subscribe": "events", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "events", "startingTimestamp": "1", "startingOffsets": "earliest"},
         "contradict"),
        ({"subscribe": "events", "startingTimestamp": "1",
          "startingOffsetsByTimestamp": '{"events":{"0":1}}'}, "contradict"),
        ({"subscribe": "events", "endingTimestamp": "1", "endingOffsets": "latest"},
         "contradict"),
        ({"subscribe": "events", "startingTimestamp": "yesterday"}, "milliseconds"),
        ({"subscribe": "events", "startingOffsetsByTimestamp": "[1]"},
         "startingOffsetsByTimestamp"),
        ({"subscribe": "events", "startingOffsetsByTimestampStrategy": "maybe"},
         "error or latest"),
        ({"subscribe": "../etc"}, "illegal characters"),
    ],
)  # fmt: skip
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        batch_options({"path": "/x", **options})


def test_unknown_topic_is_the_first_line_the_user_sees(read: Any) -> None:
    # checked in the driver (sparklog.datasource.driver.check_sources): otherwise Spark
    # wraps the planner's error as PYTHON_DATA_SOURCE_ERROR, the message 13 lines down
    for options in ({"subscribe": "nope"}, {"assign": '{"events": [7]}'}):
        with pytest.raises(Exception, match="nope|not 7") as e:
            read(**options).collect()
        first = str(e.value).splitlines()[0]
        assert first.startswith(f"option {next(iter(options))}: "), str(e.value)


def test_a_streams_unknown_topic_is_the_first_line_the_user_sees(
    spark: Any, data: str, tmp_path: Path
) -> None:
    sparklog.spark.register(spark)
    with pytest.raises(Exception, match="nope") as e:
        spark.readStream.format("sparklog").option("subscribe", "nope").load(
            data
        ).writeStream.format("noop").option(
            "checkpointLocation", str(tmp_path / "ck")
        ).start().awaitTermination(120)
    assert str(e.value).splitlines()[0].startswith("option subscribe: "), str(e.value)


def test_a_path_without_storage_is_the_first_line_the_user_sees(spark: Any, tmp_path: Path) -> None:
    sparklog.spark.register(spark)
    wrong = str(tmp_path / "not-a-storage-root")
    with pytest.raises(Exception, match="not-a-storage-root") as e:
        spark.read.format("sparklog").option("subscribe", "events").load(wrong).collect()
    assert "not-a-storage-root" in str(e.value).splitlines()[0], str(e.value)
    with pytest.raises(Exception, match="not-a-storage-root") as e:
        spark.readStream.format("sparklog").option("subscribe", "events").load(
            wrong
        ).writeStream.format("noop").option(
            "checkpointLocation", str(tmp_path / "ck")
        ).start().awaitTermination(120)
    assert "not-a-storage-root" in str(e.value).splitlines()[0], str(e.value)


def test_missing_path_is_a_clear_error() -> None:
    with pytest.raises(OptionError, match="path"):
        batch_options({"subscribe": "t"})


def test_offset_filters_narrow_the_scan(read: Any) -> None:
    full = read(subscribe="events", maxRecordsPerPartition="4")
    narrow = full.where("partition = 0 and offset >= 24")
    assert sorted(r.offset for r in narrow.collect()) == list(range(24, 30))
    # only the ranges of partition 0 from offset 24 are planned: 2 tasks instead of 10
    assert narrow.rdd.getNumPartitions() == 2


def test_partition_filter_skips_other_partitions(read: Any) -> None:
    df = read(subscribe="events", maxRecordsPerPartition="4").where("partition in (1)")
    assert df.rdd.getNumPartitions() == 2
    assert sorted(r.offset for r in df.collect()) == [0, 1, 2, 3, 4]


def test_timestamp_filter_starts_at_the_time_index(read: Any) -> None:
    df = read(subscribe="events", maxRecordsPerPartition="4").where(
        "partition = 0 and timestamp >= timestamp_millis(1700000000026)"
    )
    assert sorted(r.offset for r in df.collect()) == [26, 27, 28, 29]
    assert df.rdd.getNumPartitions() == 1


def test_filters_spark_cannot_push_still_apply(read: Any) -> None:
    df = read(subscribe="events").where("offset % 10 = 3 and partition = 0")
    assert sorted(r.offset for r in df.collect()) == [3, 13, 23]


def test_small_batches_are_coalesced_before_spark_sees_them() -> None:
    from sparklog.datasource.scan import coalesce

    small = [pa.record_batch({"offset": pa.array([i], pa.int64())}) for i in range(10)]
    big = pa.record_batch({"offset": pa.array(range(10, 20), pa.int64())})
    given = [*small[:7], big, *small[7:]]
    out = list(coalesce(given, rows=4))
    assert [b.num_rows for b in out] == [4, 13, 3]
    assert [o for b in out for o in b.column(0).to_pylist()] == [
        o for b in given for o in b.column(0).to_pylist()
    ]  # every row, in order
    assert list(coalesce([big], rows=4)) == [big]  # a large batch passes as it is


def test_kafka_check_crcs_reaches_every_planned_range(data: str) -> None:
    from sparklog.datasource.batch import SparkLogBatchReader

    opts = batch_options({"path": data, "subscribe": "events", "kafka.check.crcs": "false"})
    ranges = SparkLogBatchReader(opts).partitions()
    assert ranges and not any(r.check_crcs for r in ranges)
    default = SparkLogBatchReader(batch_options({"path": data, "subscribe": "events"}))
    assert all(r.check_crcs for r in default.partitions())


def test_a_wrong_option_is_the_first_line_the_user_sees(spark: Any, data: str) -> None:
    sparklog.spark.register(spark)
    reads = [
        spark.read.format("sparklog").options(subscribe="events", startingOffsets="soon"),
        spark.readStream.format("sparklog").options(subscribe="events", maxOffsetsPerTrigger=0),
    ]
    for reader in reads:
        with pytest.raises(OptionError) as e:
            reader.load(data)
        assert str(e.value).splitlines()[0].startswith("option "), str(e.value)
    df = spark.createDataFrame([(1,)], "n int")
    with pytest.raises(OptionError, match="needs a 'value' column"):
        df.write.format("sparklog").option("kafka.bootstrap.servers", "h:1").option(
            "topic", "t"
        ).save()
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        spark.readStream.format("rate").load().withColumnRenamed("value", "v").writeStream.format(
            "sparklog"
        ).option("topic", "t").start()


@pytest.fixture
def txn_data(tmp_path: Path) -> str:
    """Topic "tx": a committed transaction, an aborted one (sealed by a roll), a plain
    record, then a transaction still open."""
    from sparklog.storage.producers import ProducerBatch

    root = str(tmp_path / "txdata")
    storage = Storage(root)
    storage.topics.create("tx", 1)
    log = storage.open_log("tx", 0)
    log.append(make_records([b"c1", b"c2"]), producer=ProducerBatch(1, 0, 0, 2, True))
    log.append_marker(1, 0, commit=True, coordinator_epoch=0)
    log.append(make_records([b"a1"]), producer=ProducerBatch(2, 0, 0, 1, True))
    log.append_marker(2, 0, commit=False, coordinator_epoch=0)
    log.roll()
    log.append(make_records([b"plain"]))
    log.append(make_records([b"open"]), producer=ProducerBatch(3, 0, 0, 1, True))
    log.append(make_records([b"past-lso"]))
    log.close()
    return root


def test_read_committed_is_the_default_and_hides_aborted_and_open_records(
    spark: Any, txn_data: str
) -> None:
    sparklog.spark.register(spark)
    df = spark.read.format("sparklog").option("subscribe", "tx").load(txn_data)
    assert [(r.value, r.offset) for r in df.orderBy("offset").collect()] == [
        (b"c1", 0), (b"c2", 1), (b"plain", 5),
    ]  # fmt: skip


def test_read_uncommitted_shows_every_record_but_no_markers(spark: Any, txn_data: str) -> None:
    sparklog.spark.register(spark)
    df = (
        spark.read.format("sparklog")
        .option("subscribe", "tx")
        .option("kafka.isolation.level", "read_uncommitted")
        .load(txn_data)
    )
    assert [r.value for r in df.orderBy("offset").collect()] == [
        b"c1", b"c2", b"a1", b"plain", b"open", b"past-lso",
    ]  # fmt: skip


def test_an_unknown_isolation_level_is_refused(txn_data: str) -> None:
    with pytest.raises(OptionError, match="kafka.isolation.level"):
        batch_options({"path": txn_data, "subscribe": "tx", "kafka.isolation.level": "dirty"})
