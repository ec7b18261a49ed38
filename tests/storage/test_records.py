"""``sparklog.storage.records``: the per-batch helpers of the append path, compiled
(``sparklog._columns``) and not, give the same columns."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sparklog.kafka.records import build_batch, decode_batch
from sparklog.storage import records
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.records import (
    DECODED_SCHEMA,
    max_timestamp,
    normalize,
    offsets_array,
    sequences_array,
)


def _decoded(n: int) -> pa.RecordBatch:
    rows = [
        (i, 1_000 + (i * 7919) % 101, b"k%d" % i, None if i % 3 else b"v", []) for i in range(n)
    ]
    return decode_batch(memoryview(build_batch(rows)), max_decompressed=1 << 20).records


@pytest.mark.parametrize("producer", [None, ProducerBatch(9, 2, 2**31 - 3, 7, transactional=True)])
def test_a_decoded_batch_is_normalized_as_any_other_batch(producer: ProducerBatch | None) -> None:
    batch = _decoded(7)
    assert batch.schema.equals(DECODED_SCHEMA)  # the fast path's
    general = pa.RecordBatch.from_arrays(  # the same columns, nullable: the general path
        batch.columns, names=batch.schema.names
    )
    assert not general.schema.equals(DECODED_SCHEMA)
    kw = {
        "base_offset": 40,
        "now_ms": 5,
        "log_append_time": False,
        "producer": producer,
        "codec": 2,
    }
    assert normalize(batch, **kw).equals(normalize(general, **kw))


def test_a_decoded_batch_with_null_timestamps_is_refused() -> None:
    batch = _decoded(3)
    bad = batch.set_column(
        0, DECODED_SCHEMA.field(0), pa.array([1, None, 3], records.TIMESTAMP_TYPE)
    )
    with pytest.raises(records.InvalidRecordsError, match="timestamp"):
        normalize(bad, base_offset=0, now_ms=0, log_append_time=False)


@pytest.mark.parametrize("compiled", [True, False])
def test_offsets_sequences_and_the_max_timestamp(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not compiled:
        monkeypatch.setattr(records, "_columns", None)
    elif records._columns is None:
        pytest.skip("sparklog._columns is not built")
    assert offsets_array(2**40, 3).to_pylist() == [2**40, 2**40 + 1, 2**40 + 2]
    assert sequences_array(2**31 - 2, 4).to_pylist() == [2**31 - 2, 2**31 - 1, 0, 1]
    assert sequences_array(2**31 - 2, 4).type == pa.int32()
    ts = pa.array([5, 90, 7, 3], pa.int64()).cast(records.TIMESTAMP_TYPE)
    batch = pa.RecordBatch.from_arrays([ts], names=["timestamp"])
    assert max_timestamp(batch) == 90
    assert max_timestamp(batch.slice(2)) == 7  # an array offset into the buffer
    assert max_timestamp(batch.slice(2)) == pc.max(batch.slice(2).column(0)).value
