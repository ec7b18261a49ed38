"""Transactions in storage: control records, open and aborted transactions in the producer
state, the last stable offset, the readers' transaction index, and all of it surviving
reopen, sealing and a lost snapshot; segments written before the ``attributes`` column."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from sparklog.errors import InvalidProducerEpochError
from sparklog.storage import names
from sparklog.storage.control import CONTROL, TRANSACTIONAL, control_type
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.producers import AbortedTxn, ProducerBatch
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import make_records

from .helpers import open_log, values

PID = 7


def txn(plog: PartitionLog, first_seq: int, *vals: bytes, pid: int = PID, epoch: int = 0) -> int:
    batch = make_records(list(vals))
    r = plog.append(batch, producer=ProducerBatch(pid, epoch, first_seq, len(vals), True))
    return r.base_offset


def committed_values(fs: LocalFileSystem, root: str) -> list[bytes]:
    view = PartitionReader(fs, root, "t", 0).view(committed=True)
    return values(view.visible(b) for b in view.batches(view.log_start_offset))


def test_a_marker_is_a_control_record_after_the_transaction(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"a", b"b")
    marker = plog.append_marker(PID, 0, commit=True, coordinator_epoch=3)
    assert marker.base_offset == 2
    (row,) = [r for b in plog.batches(2) for r in b.to_pylist()]
    assert row["attributes"] == CONTROL | TRANSACTIONAL
    assert control_type(row["key"]) == 1 and row["value"] == b"\x00\x00\x00\x00\x00\x03"
    assert (row["producer_id"], row["sequence"]) == (PID, -1)


def test_an_open_transaction_holds_the_last_stable_offset(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    plog.append(make_records([b"plain"]))
    txn(plog, 0, b"t1")
    plog.append(make_records([b"after"]))
    assert (plog.view().last_stable_offset, plog.high_watermark) == (1, 3)
    assert committed_values(fs, root) == [b"plain"]
    plog.append_marker(PID, 0, commit=True, coordinator_epoch=0)
    assert plog.view().last_stable_offset == 4
    assert committed_values(fs, root) == [b"plain", b"t1", b"after"]


def test_an_aborted_transaction_is_listed_and_hidden_from_committed_readers(
    fs: LocalFileSystem, root: str
) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"x", b"y")
    plog.append(make_records([b"other"]))
    plog.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    view = plog.view()
    assert view.txn.aborted_between(0, 10) == [AbortedTxn(PID, 0, 3)]
    assert committed_values(fs, root) == [b"other"]
    everything = PartitionReader(fs, root, "t", 0).view()
    assert values(everything.visible(b) for b in everything.batches(0)) == [b"x", b"y", b"other"]


def test_a_marker_below_the_producers_epoch_is_refused(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"a", epoch=2)
    with pytest.raises(InvalidProducerEpochError):
        plog.append_marker(PID, 1, commit=True, coordinator_epoch=0)


def test_a_fencing_marker_refuses_the_old_epochs_batches(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"zombie")
    plog.append_marker(PID, 1, commit=False, coordinator_epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        txn(plog, 1, b"zombie-again")
    txn(plog, 0, b"successor", epoch=1)  # the new epoch starts at sequence 0


def test_transactions_survive_reopen_seal_and_a_lost_snapshot(
    fs: LocalFileSystem, root: str
) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"aborted")
    plog.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    txn(plog, 1, b"open")
    plog.roll()
    plog.close()
    path = names.partition_dir(root, "t", 0)
    os.remove(os.path.join(path, names.PRODUCER_STATE_FILE))
    again = open_log(fs, root)
    view = again.view()
    assert view.txn.aborted == (AbortedTxn(PID, 0, 1),)
    assert (view.last_stable_offset, again.high_watermark) == (2, 3)
    assert [s.sealed for s in again.manifest.segments] == [True, False]
    again.append_marker(PID, 0, commit=True, coordinator_epoch=0)
    assert committed_values(fs, root) == [b"open"]


def test_readers_in_other_processes_get_the_index_before_the_high_watermark(
    fs: LocalFileSystem, root: str
) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"a")
    reader = PartitionReader(fs, root, "t", 0)
    view = reader.view()
    assert (view.hwm.offset, view.last_stable_offset) == (1, 0)
    plog.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    view = reader.view()
    assert (view.hwm.offset, view.last_stable_offset) == (2, 2)
    assert view.txn.aborted == (AbortedTxn(PID, 0, 1),)


def test_a_partition_without_transactions_writes_no_index(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    plog.append(make_records([b"a"]))
    plog.close()
    open_log(fs, root).close()
    assert not [n for n in os.listdir(names.partition_dir(root, "t", 0)) if "transactions" in n]


def test_format_1_segments_read_with_attributes_zero_and_roll_before_appends(
    fs: LocalFileSystem, root: str
) -> None:
    from sparklog.storage import active

    plog = open_log(fs, root)
    plog.append(make_records([b"old-1", b"old-2"]))
    plog.close()
    # rewrite the active segment as format 1 would have: header format 1, no attributes
    path = names.partition_dir(root, "t", 0)
    seg = os.path.join(path, names.segment_name(0, kind=names.ACTIVE_KIND))
    buf = pa.py_buffer(open(seg, "rb").read())  # noqa: SIM115
    (h,) = active.scan(buf, 0)
    batch = active.decode_frame(buf, h).drop_columns(["attributes"])
    with open(seg, "wb") as f:
        f.write(active.FILE_MAGIC + (1).to_bytes(4, "little") + bytes(4))
    legacy = active.ActiveSegment(fs, path, 0, [], 4096)
    legacy.append(batch)
    legacy.sync()
    legacy.close()
    again = open_log(fs, root)
    rows = [r for b in again.batches(0) for r in b.to_pylist()]
    assert [(r["value"], r["attributes"]) for r in rows] == [(b"old-1", 0), (b"old-2", 0)]
    again.append(make_records([b"new"]))
    assert [s.base_offset for s in again.manifest.segments][-1] == 2  # rolled first
    assert values(again.batches(0)) == [b"old-1", b"old-2", b"new"]


def test_aborted_transactions_below_the_log_start_are_forgotten(
    fs: LocalFileSystem, root: str
) -> None:
    plog = open_log(fs, root)
    txn(plog, 0, b"gone")
    plog.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    plog.append(make_records([b"kept"]))
    assert plog.view().txn.aborted == (AbortedTxn(PID, 0, 1),)
    plog.delete_records(2)
    assert plog.view().txn.aborted == ()
