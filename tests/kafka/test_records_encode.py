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
from sparklog.storage.records import TIMESTAMP_TYPE, normalize

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
