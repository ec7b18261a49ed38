"""The produce benchmark's in-run baselines and what they are built from (``bench/produce.py``):
the stored Arrow batches of a run, rebuilt into the Kafka record batches the producer
sent; (a) those bytes appended to a plain file with an fdatasync per 1 MiB; (b) the
broker's decoder over them on one core."""

from __future__ import annotations

import os
import struct
import time

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from sparklog.kafka.records import decode_batch
from sparklog.storage import Storage

MIB = 1024 * 1024
DISK_CHUNK = MIB  # baseline (a): fdatasync per 1 MiB
MAX_DECOMPRESSED = 64 * MIB


def stored_batches(data_dir: str, topic: str, partitions: int) -> list[pa.RecordBatch]:
    """Every stored Arrow batch of ``topic`` (one per produce batch), partition by partition."""
    storage = Storage(data_dir)
    out: list[pa.RecordBatch] = []
    for p in range(partitions):
        out += list(storage.reader(topic, p).view().batches(0))
    return out


def rebuild_kafka_batches(batches: list[pa.RecordBatch]) -> list[bytes]:
    """The Kafka record batches the producer sent (same records, same batch boundaries),
    built as librdkafka builds them: magic 2, uncompressed, no producer id. Checked once
    against batches captured from a live producer: byte for byte identical."""
    out = []
    for b in batches:
        keys = b.column("key").to_pylist()
        values = b.column("value").to_pylist()
        ts = b.column("timestamp").cast(pa.int64()).to_pylist()
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=10**9,
        )
        for i in range(b.num_rows):
            builder.append(i, ts[i], keys[i], values[i], [])
        data = builder.build()
        # partitionLeaderEpoch: librdkafka writes the epoch it knows (0 for a new topic),
        # aiokafka -1. Outside the CRC, unread by the broker; set so the bytes are identical.
        struct.pack_into(">i", data, 12, 0)
        out.append(bytes(data))
    return out


def run_disk(blob: bytes, tmp: str) -> float:
    """Baseline (a): append ``blob`` to a plain file, fdatasync per 1 MiB; seconds."""
    os.sync()
    path = os.path.join(tmp, "disk-baseline.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    view = memoryview(blob)
    try:
        t0 = time.perf_counter()
        for pos in range(0, len(view), DISK_CHUNK):
            chunk = view[pos : pos + DISK_CHUNK]
            written = os.write(fd, chunk)
            while written < len(chunk):
                written += os.write(fd, chunk[written:])
            os.fdatasync(fd)
        return time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)


def run_cpu(batches: list[bytes], expected: int) -> float:
    """Baseline (b): decode every batch to Arrow with the broker's codec; seconds."""
    t0 = time.perf_counter()
    count = 0
    for raw in batches:
        count += decode_batch(memoryview(raw), max_decompressed=MAX_DECOMPRESSED).count
    seconds = time.perf_counter() - t0
    if count != expected:
        raise AssertionError(f"decoded {count} records, expected {expected}")
    return seconds
