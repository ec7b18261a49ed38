"""Idempotent-producer state beside the log (``sparklog.storage.producers``): checked inside
``PartitionLog.append``, snapshotted at rolls and close, rebuilt by whoever opens the
partition next from storage alone."""

from __future__ import annotations

import pytest

from sparklog.errors import OutOfOrderSequenceError
from sparklog.storage import names
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.records import sequences_array

from .helpers import offsets, open_log, records

PID, EPOCH = 4242, 0


def _append(log, first_seq: int, n: int):  # type: ignore[no-untyped-def]
    batch = records(first_seq, n)
    pb = ProducerBatch(PID, EPOCH, first_seq, n)
    return log.append(batch, producer=pb)


def test_a_retry_of_a_recent_batch_gets_its_offsets_and_writes_nothing(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    first = _append(log, 0, 3)
    _append(log, 3, 2)
    retry = _append(log, 0, 3)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (0, 2)
    assert first.base_offset == 0 and not first.duplicate
    assert log.log_end_offset == 5 and offsets(log.batches(0)) == [0, 1, 2, 3, 4]


def test_a_gap_in_sequences_is_refused_and_nothing_is_written(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    _append(log, 0, 3)
    with pytest.raises(OutOfOrderSequenceError, match="expected 3"):
        _append(log, 7, 1)
    assert log.log_end_offset == 3


def test_the_next_writer_rebuilds_the_state_from_storage(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root, segment_bytes=4096)
    for i in range(30):  # rolls snapshot the state on the way
        _append(log, 3 * i, 3)
    log.sync()
    log.wait_sealed()  # a dead writer's sealer would be gone too
    del log  # no close: the writer is gone as after a crash (no final snapshot)
    nxt = open_log(fs, root, segment_bytes=4096)
    retry = _append(nxt, 3 * 29, 3)
    assert retry.duplicate and retry.base_offset == 87
    assert not _append(nxt, 90, 3).duplicate


def test_an_unreadable_snapshot_is_rebuilt_from_the_log(fs: LocalFileSystem, root: str) -> None:
    log = open_log(fs, root)
    _append(log, 0, 3)
    log.close()
    with open(f"{log.path}/{names.PRODUCER_STATE_FILE}", "wb") as f:
        f.write(b"{not json")
    again = open_log(fs, root)
    assert _append(again, 0, 3).duplicate


def test_the_log_stamps_each_record_with_its_producer_and_sequence(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    log.append(records(0, 3), producer=ProducerBatch(PID, 2, 0, 3))
    log.append(records(3, 1))
    cols = ("producer_id", "producer_epoch", "sequence")
    got = [tuple(r[c] for c in cols) for b in log.batches(0) for r in b.to_pylist()]
    assert got == [(PID, 2, 0), (PID, 2, 1), (PID, 2, 2), (-1, -1, -1)]


def test_sequences_wrap_at_two_to_the_31() -> None:
    assert sequences_array(2**31 - 2, 4).to_pylist() == [2**31 - 2, 2**31 - 1, 0, 1]
    assert sequences_array(5, 2).to_pylist() == [5, 6]
