"""Transactional and control batches in the codec: a produce batch's transactional bit is
read, a control batch from a producer is refused, and stored records of several producers
and kinds come back as one Kafka record batch per run, with its producer and bits."""

from __future__ import annotations

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from sparklog.errors import InvalidBatchError
from sparklog.kafka.records import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    build_batch,
    decode_batch,
    encode_batches,
    split_batches,
)
from sparklog.storage.control import CONTROL, TRANSACTIONAL
from sparklog.storage.producers import ProducerBatch
from sparklog.storage.records import make_records, normalize


def _records(n: int) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    return [(i, 1_700_000_000_000 + i, None, b"v%d" % i, []) for i in range(n)]


def test_a_transactional_produce_batch_decodes_as_transactional() -> None:
    raw = build_batch(_records(3), producer_id=5, producer_epoch=1, base_sequence=0,
                      attributes=TRANSACTIONAL_BIT)  # fmt: skip
    decoded = decode_batch(memoryview(raw), max_decompressed=1 << 20)
    assert decoded.transactional and decoded.producer_id == 5


def test_a_control_batch_from_a_producer_is_refused() -> None:
    raw = build_batch(_records(1), producer_id=5, producer_epoch=1, base_sequence=0,
                      attributes=TRANSACTIONAL_BIT | CONTROL_BIT)  # fmt: skip
    with pytest.raises(InvalidBatchError, match="control"):
        decode_batch(memoryview(raw), max_decompressed=1 << 20)


def test_a_transactional_batch_without_a_producer_id_is_refused() -> None:
    raw = build_batch(_records(1), attributes=TRANSACTIONAL_BIT)
    with pytest.raises(InvalidBatchError, match="producer id"):
        decode_batch(memoryview(raw), max_decompressed=1 << 20)


def _stored(base: int, n: int, pid: int, attrs: int) -> pa.RecordBatch:
    producer = ProducerBatch(pid, 0, 0, n, transactional=bool(attrs)) if pid >= 0 else None
    values = make_records([b"r%d" % (base + i) for i in range(n)])
    batch = normalize(values, base_offset=base, now_ms=1_700_000_000_000,
                      log_append_time=False, producer=producer)  # fmt: skip
    if attrs & CONTROL:
        i = batch.schema.get_field_index("attributes")
        batch = batch.set_column(i, batch.schema.field(i), pa.array([attrs] * n, pa.int8()))
    return batch


def test_mixed_stored_records_encode_as_one_kafka_batch_per_run() -> None:
    # one sealed row group: plain records, a transaction, its marker, another producer
    rows = pa.concat_batches([
        _stored(0, 2, -1, 0),
        _stored(2, 3, 9, TRANSACTIONAL),
        _stored(5, 1, 9, CONTROL | TRANSACTIONAL),
        _stored(6, 2, 4, 0),
    ])  # fmt: skip
    out = encode_batches([rows])
    got = []
    for raw in split_batches(out):
        b = DefaultRecordBatch(bytes(raw))
        got.append((b.base_offset, b.producer_id, b.is_transactional, b.is_control_batch,
                    len(list(b))))  # fmt: skip
    assert got == [
        (0, -1, False, False, 2),
        (2, 9, True, False, 3),
        (5, 9, True, True, 1),
        (6, 4, False, False, 2),
    ]
