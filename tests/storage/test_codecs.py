"""The codec a batch was produced with is kept in its records' attribute bits (``attributes
& 0x07``) through the active segment, sealing to Parquet and a reopen; the bits never make
a record look transactional."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import make_records
from sparklog.storage.txnindex import TxnIndex, visible

from .helpers import open_log, rows

SNAPPY, ZSTD = 2, 4


def _attributes(batches: list[pa.RecordBatch]) -> list[int]:
    return [r["attributes"] for r in rows(batches)]  # type: ignore[misc]


def test_the_codec_of_a_batch_is_kept_in_the_active_segment(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    plog.append(make_records([b"a", b"b"]), codec=SNAPPY)
    plog.append(make_records([b"c"]))
    assert _attributes(list(plog.batches(0))) == [SNAPPY, SNAPPY, 0]
    reader = PartitionReader(fs, root, "t", 0).view()  # another process's view, same bits
    assert _attributes(list(reader.batches(0))) == [SNAPPY, SNAPPY, 0]


def test_the_codec_survives_sealing_and_reopening(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    plog.append(make_records([b"a"]), codec=ZSTD)
    plog.append(make_records([b"b"]), producer=ProducerBatch(5, 0, 0, 1, True), codec=SNAPPY)
    plog.roll()  # seals before it returns
    assert plog.manifest.segments[0].sealed
    plog.close()
    plog = open_log(fs, root)
    assert _attributes(list(plog.batches(0))) == [ZSTD, SNAPPY | 0x10]


def test_a_codec_outside_the_three_codec_bits_is_refused(fs: LocalFileSystem, root: str) -> None:
    plog = open_log(fs, root)
    with pytest.raises(ValueError, match="codec 8"):
        plog.append(make_records([b"a"]), codec=8)
    assert plog.high_watermark == 0


def test_compressed_records_are_not_taken_for_transactional_ones(
    fs: LocalFileSystem, root: str
) -> None:
    plog = open_log(fs, root)
    plog.append(make_records([b"a", b"b"]), codec=ZSTD)
    (batch,) = plog.batches(0)
    # a batch with no transactional record is returned as it is: no filter, no copy
    assert visible(batch, TxnIndex(), committed=True) is batch
