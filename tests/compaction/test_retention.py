"""Retention on real storage (driver-only, no Spark): by time, by bytes, below the log
start; what readers and the writer see afterwards; the job's command line."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from sparklog.cli import jobs
from sparklog.cli.exits import ExitCode
from sparklog.compaction.retention import apply_retention
from sparklog.errors import OffsetOutOfRangeError
from sparklog.storage import Storage, checkpoints, crashpoints, names
from sparklog.storage.config import TopicConfig
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import ManifestStore
from sparklog.storage.records import make_records

from .helpers import TOPIC, Model, append, manifest, read_all, segment_names

NOW = int(time.time() * 1000)
HOUR = 3600 * 1000


def _storage(root: str, partitions: int = 1, **configs: str) -> Storage:
    s = Storage(root)
    s.topics.create(TOPIC, partitions, {k.replace("_", "."): v for k, v in configs.items()})
    return s


def _three_segments(storage: Storage, partition: int = 0, now: int = NOW) -> Model:
    """Segments [0,10) [10,20) [20,30), sealed, their records 3, 2 and 1 hours older than
    ``now``; then 3 records in the active segment."""
    model = Model()
    for i, t in enumerate((now - 3 * HOUR, now - 2 * HOUR, now - HOUR)):
        keys = [b"k%d" % j for j in range(10)]
        append(storage, model, partition, keys, [b"v%d" % (i * 10 + j) for j in range(10)], ts=t)
    append(storage, model, partition, [b"x"] * 3, [b"a", b"b", b"c"], ts=now, roll=False)
    return model


def test_retention_by_time_deletes_old_segments_and_advances_the_log_start(root: str) -> None:
    storage = _storage(root, retention_ms=str(90 * 60 * 1000))
    model = _three_segments(storage)
    (outcome,) = apply_retention(root, [TOPIC], now_ms=NOW).outcomes
    assert (outcome.segments_deleted, outcome.records_deleted) == (2, 20)
    assert (outcome.log_start_before, outcome.log_start_after) == (0, 20)
    assert outcome.reasons == ("retention.ms", "retention.ms")
    assert manifest(storage).log_start_offset == 20
    assert segment_names(storage)[0] == names.segment_name(20)
    assert read_all(storage) == model.records[20:]
    assert "log start 0 -> 20" in outcome.line()


def test_a_run_records_what_it_removed_for_metrics(root: str) -> None:
    from sparklog.storage import jobruns

    storage = _storage(root, retention_ms=str(90 * 60 * 1000))
    _three_segments(storage)
    apply_retention(root, [TOPIC], now_ms=NOW)
    run = jobruns.last(storage.fs, storage.root, TOPIC, "retention")
    assert run is not None
    assert (run.partitions, run.segments_removed, run.records_removed) == (1, 2, 20)


def test_retention_by_bytes_keeps_at_least_retention_bytes(root: str) -> None:
    storage = _storage(root, retention_ms="-1")
    model = _three_segments(storage)
    sizes = [s.size_bytes for s in manifest(storage).segments[:3]]
    # with the active segment's bytes, everything but the first segment still fits
    storage.topics.alter_configs(TOPIC, {"retention.bytes": str(sizes[1] + sizes[2])})
    (outcome,) = apply_retention(root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.segments_deleted == 1
    assert outcome.reasons == ("retention.bytes",)
    assert outcome.bytes_deleted == sizes[0]
    assert read_all(storage) == model.records[10:]


def test_retention_never_touches_the_active_segment(root: str) -> None:
    storage = _storage(root, retention_ms="0", retention_bytes="0")
    model = _three_segments(storage)
    apply_retention(root, [TOPIC], now_ms=NOW + HOUR)
    assert segment_names(storage) == [names.segment_name(30, kind=names.ACTIVE_KIND)]
    assert read_all(storage) == model.records[30:]


def test_retention_covers_every_partition_of_every_topic_by_default(root: str) -> None:
    storage = _storage(root, partitions=2, retention_ms=str(90 * 60 * 1000))
    _three_segments(storage, 0)
    _three_segments(storage, 1)
    storage.topics.create("other", 1, {})
    report = apply_retention(root, now_ms=NOW)
    starts = {(o.topic, o.partition): o.log_start_after for o in report.outcomes}
    assert starts == {(TOPIC, 0): 20, (TOPIC, 1): 20, ("other", 0): 0}
    other = next(o for o in report.outcomes if o.topic == "other")
    assert other.line() == "retention other-0: no log on disk yet"


def test_delete_records_drops_the_segments_wholly_below_its_log_start_itself(
    root: str,
) -> None:
    """On any cleanup.policy; retention then has nothing left to drop there."""
    storage = _storage(root, cleanup_policy="compact")
    model = _three_segments(storage)
    log = storage.open_log(TOPIC, 0)
    log.delete_records(15)
    log.close()
    assert manifest(storage).log_start_offset == 15
    assert segment_names(storage)[0] == names.segment_name(10)
    (outcome,) = apply_retention(root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.segments_deleted == 0
    assert read_all(storage, start=15) == model.records[15:]


def test_segments_below_a_log_start_go_even_on_a_compacted_topic(root: str) -> None:
    """A log start moved without dropping segments (a manifest of an older writer)."""
    storage = _storage(root, cleanup_policy="compact")
    _three_segments(storage)
    store = ManifestStore(storage.fs, names.partition_dir(storage.root, TOPIC, 0))
    store.commit(lambda m: dataclasses.replace(m, log_start_offset=15))
    (outcome,) = apply_retention(root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.segments_deleted == 1
    assert outcome.reasons == ("below the log start offset",)
    assert manifest(storage).log_start_offset == 15
    assert segment_names(storage)[0] == names.segment_name(10)


def test_reads_below_the_new_log_start_are_out_of_range(root: str) -> None:
    storage = _storage(root, retention_ms=str(90 * 60 * 1000))
    _three_segments(storage)
    apply_retention(root, [TOPIC], now_ms=NOW)
    with pytest.raises(OffsetOutOfRangeError, match="offset 5 is outside"):
        read_all(storage, start=5)


def test_retention_deletes_no_file_itself_and_the_writer_collects_them_after_the_delay(
    root: str,
) -> None:
    storage = _storage(root, retention_ms=str(90 * 60 * 1000), file_delete_delay_ms="600000")
    _three_segments(storage)
    path = names.partition_dir(storage.root, TOPIC, 0)
    first = names.segment_name(0)
    apply_retention(root, [TOPIC], now_ms=NOW)
    assert first in os.listdir(path)
    config = storage.topics.get(TOPIC).config
    PartitionLog.open(storage.fs, storage.root, TOPIC, 0, config).close()
    assert first in os.listdir(path)  # dropped less than file.delete.delay.ms ago
    later = time.time() + 601
    PartitionLog.open(storage.fs, storage.root, TOPIC, 0, config, clock=lambda: later).close()
    assert first not in os.listdir(path)
    assert names.offset_index_name(first) not in os.listdir(path)


def test_a_second_run_has_nothing_to_delete(root: str) -> None:
    storage = _storage(root, retention_ms=str(90 * 60 * 1000))
    _three_segments(storage)
    apply_retention(root, [TOPIC], now_ms=NOW)
    version = manifest(storage).version
    (outcome,) = apply_retention(root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.segments_deleted == 0
    assert outcome.line() == f"retention {TOPIC}-0: nothing to delete (log start 20)"
    assert manifest(storage).version == version


def test_retention_job_prints_a_line_per_partition_and_a_summary(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = _storage(root, retention_ms=str(90 * 60 * 1000))
    _three_segments(storage, now=int(time.time() * 1000))  # the job reads the clock itself
    assert jobs.retention_main(["--topic", TOPIC, "--data-dir", root]) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"retention {TOPIC}-0: deleted 2 segments (20 records")
    assert out[-1].startswith("retention: done in ")
    assert "1 partitions, 2 segments deleted" in out[-1]


def test_retention_job_on_an_unknown_topic_exits_2_naming_it(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _storage(root)
    assert jobs.retention_main(["--topic", "nope", "--data-dir", root]) == ExitCode.USAGE
    assert "'nope'" in capsys.readouterr().err


def test_retention_job_on_a_corrupt_manifest_fails_with_the_path(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = _storage(root)
    _three_segments(storage)
    m = manifest(storage)
    path = os.path.join(
        names.manifest_dir(names.partition_dir(storage.root, TOPIC, 0)),
        names.version_name(m.version + 1),
    )
    storage.fs.create_exclusive(path, b"{broken")
    assert jobs.retention_main(["--data-dir", root]) == ExitCode.FAILED
    err = capsys.readouterr().err
    assert err.startswith("retention: FAILED: ")
    assert names.version_name(m.version + 1) in err


def test_default_config_keeps_a_week(root: str) -> None:
    assert TopicConfig().retention_ms == 7 * 24 * HOUR
    storage = _storage(root)
    _three_segments(storage)
    assert apply_retention(root, [TOPIC], now_ms=NOW).outcomes[0].segments_deleted == 0


def test_retention_does_not_wait_for_the_sealer(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report's case: 64 KiB segments, retention.bytes 200000, 30,000 records, and the
    job right away while the background sealer is held back: the rolled .arrow segments go,
    and the sealer, released, seals only what is left."""
    storage = _storage(root, segment_bytes="65536", retention_bytes="200000")
    release = threading.Event()
    log = storage.open_log(TOPIC, 0)
    try:
        with crashpoints.hooked("seal.before_write", lambda: release.wait(60)):
            for i in range(30):
                log.append(
                    make_records(
                        [b"%06d" % n + b"x" * 40 for n in range(i * 1000, i * 1000 + 1000)]
                    )
                )
            before = manifest(storage)
            assert len(before.unsealed_rolled) > 12, "the sealer was not held back"
            assert jobs.retention_main(["--topic", TOPIC, "--data-dir", root]) == ExitCode.OK
            release.set()
            log.wait_sealed()
        after = log.refresh()
        assert after.log_start_offset > 0
        dropped = [s for s in before.unsealed_rolled if after.find(s.name) is None]
        dropped = [s for s in dropped if s.next_offset <= after.log_start_offset]  # type: ignore[operator]
        assert len(dropped) > 12
        for seg in dropped:  # never sealed after all
            assert not os.path.exists(os.path.join(log.path, names.segment_name(seg.base_offset)))
        active = checkpoints.active_segment_bytes(log.fs, log.path, after.active.name)
        # the rule kept at least retention.bytes, counting .arrow files as they were
        kept = [s for s in before.segments[:-1] if s not in dropped]
        assert sum(s.size_bytes for s in kept) + active >= 200_000
        assert after.unsealed_rolled == []
        values = [
            v for b in log.batches(after.log_start_offset) for v in b.column("value").to_pylist()
        ]
        assert [int(v[:6]) for v in values] == list(range(after.log_start_offset, 30_000))
    finally:
        release.set()
        log.close()
    out = capsys.readouterr().out
    assert f"retention {TOPIC}-0: deleted {len(dropped)} segments" in out
    assert "retention.bytes" in out


def test_retention_says_what_it_could_not_delete_and_why(root: str) -> None:
    storage = _storage(root, retention_ms="-1", retention_bytes="10")
    _three_segments(storage)  # three rolled segments, 3 records in the active one
    (outcome,) = apply_retention(root, [TOPIC], now_ms=NOW).outcomes
    assert outcome.segments_deleted == 3
    assert outcome.held and "active segment alone holds" in outcome.held[0]
    assert "could not delete: the active segment alone holds" in outcome.line()
