"""The fetch path's encoder: ``encode_batches`` through ``sparklog._columns`` writes the
bytes aiokafka's builder writes, for any stored batch it takes (nulls, offset gaps of a
compacted log, slices, LogAppendTime, producer ids), and a consumer reads it back."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.kafka import records as R
from sparklog.kafka.records import encode_batches, split_batches
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.records import TIMESTAMP_TYPE, control_record, normalize

pytestmark = pytest.mark.skipif(R._columns is None, reason="sparklog._columns is not built")

ROW = st.tuples(
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=300),
    st.integers(-(2**40), 2**40),
    st.integers(1, 5),  # the gap to the next offset
)


def stored(rows: list[tuple[Any, ...]], *, append_time: bool, producer: bool) -> pa.RecordBatch:
    batch = pa.record_batch(
        [
            pa.array([r[0] for r in rows], pa.binary()),
            pa.array([r[1] for r in rows], pa.binary()),
            pa.array([1_700_000_000_000 + r[2] for r in rows], TIMESTAMP_TYPE),
        ],
        names=["key", "value", "timestamp"],
    )
    pb = ProducerBatch(77, 3, 10, len(rows)) if producer else None
    batch = normalize(batch, base_offset=0, now_ms=1_700_000_000_000,
                      log_append_time=append_time, producer=pb)  # fmt: skip
    offsets, at = [], 500
    for r in rows:
        offsets.append(at)
        at += r[3]
    return batch.set_column(0, "offset", pa.array(offsets, pa.int64()))


def both(batches: list[pa.RecordBatch], max_records: int) -> tuple[bytes, bytes]:
    native = encode_batches(batches, max_records=max_records)
    saved, R._columns = R._columns, None
    try:
        return native, encode_batches(batches, max_records=max_records)
    finally:
        R._columns = saved


@settings(max_examples=300, deadline=None)
@given(
    st.lists(ROW, min_size=1, max_size=40),
    st.booleans(),
    st.booleans(),
    st.integers(0, 10),
    st.integers(0, 10),
    st.sampled_from([1, 3, 4096]),
)
def test_the_c_encoder_writes_what_aiokafkas_builder_writes(
    rows: list[tuple[Any, ...]], append_time: bool, producer: bool, cut_front: int,
    cut_back: int, max_records: int,
) -> None:  # fmt: skip
    batch = stored(rows, append_time=append_time, producer=producer)
    start = min(cut_front, len(rows) - 1)
    batch = batch.slice(start, max(1, len(rows) - start - cut_back))  # arrays with an offset
    native, reference = both([batch], max_records)
    assert native == reference
    # read back as a consumer reads them (a compacted log's offset gaps included)
    read = [r for v in split_batches(native) for r in DefaultRecordBatch(bytes(v))]
    assert [(r.offset, r.key, r.value) for r in read] == list(
        zip(*(batch.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True)
    )


# ---------------------------------------------------------------------------- codecs

PRODUCED = [
    (i, 1_700_000_000_000 + i, b"k%d" % i, b"compressible value " * 8, []) for i in range(50)
]


def _stored_as_produced(codec: int, *, headers: bool = False) -> pa.RecordBatch:
    """What the broker stores for a batch produced with ``codec``: decoded, then normalised
    with the codec the log keeps."""
    rows = [(d, ts, k, v, [("h", b"x")] if headers else []) for d, ts, k, v, _ in PRODUCED]
    decoded = R.decode_batch(memoryview(R.build_batch(rows, codec=codec)), max_decompressed=1 << 20)
    assert decoded.codec == codec
    return normalize(decoded.records, base_offset=100, now_ms=0, log_append_time=False,
                     codec=decoded.codec)  # fmt: skip


def _served(data: bytes) -> list[tuple[int, list[tuple[int, bytes | None, bytes | None]]]]:
    """(codec bits, records) of each record batch as a consumer reads it."""
    out = []
    for view in split_batches(data):
        recs = [(r.offset, r.key, r.value) for r in DefaultRecordBatch(bytes(view))]
        out.append((view[22] & R.CODEC_MASK, recs))
    return out


@pytest.mark.parametrize("headers", [False, True], ids=["native", "with-headers"])
@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_a_batch_is_served_in_the_codec_it_was_produced_with(codec: int, headers: bool) -> None:
    data = encode_batches([_stored_as_produced(codec, headers=headers)])
    expected = [(100 + d, k, v) for d, _ts, k, v, _h in PRODUCED]
    assert _served(data) == [(codec, expected)]
    assert len(data) < len(encode_batches([_stored_as_produced(0, headers=headers)])) / 3


def test_a_fixed_compression_type_serves_every_batch_in_its_codec() -> None:
    stored = [_stored_as_produced(2), _stored_as_produced(0)]
    served = _served(encode_batches(stored, codec=R.CODECS["zstd"]))
    assert [codec for codec, _ in served] == [4, 4]
    assert [codec for codec, _ in _served(encode_batches(stored, codec=0))] == [0, 0]


def test_records_stored_without_codec_bits_are_served_uncompressed() -> None:
    batch = stored([(b"k", b"v", 0, 1)] * 3, append_time=False, producer=True)
    assert batch.column("attributes").to_pylist() == [0, 0, 0]  # as in segments from before
    assert [codec for codec, _ in _served(encode_batches([batch]))] == [0]


def test_a_transaction_marker_is_never_compressed() -> None:
    """As Kafka 4.3.1 serves it: a transactional lz4 producer's commit marker came back
    uncompressed (attributes 0x30) from a ``compression.type=zstd`` topic too."""
    marker = normalize(control_record(True, 0), base_offset=7, now_ms=0, log_append_time=False,
                       producer=ProducerBatch(5, 0, -1, 1, transactional=True))  # fmt: skip
    marker = marker.set_column(9, "attributes", pa.array([0x30], pa.int8()))
    for codec in (R.PRODUCER_CODEC, 4):
        (view,) = split_batches(encode_batches([marker], codec=codec))
        assert view[22] == 0x30
