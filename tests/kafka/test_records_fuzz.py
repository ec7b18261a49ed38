"""Hypothesis fuzzing of the Kafka record-batch decoder, in process.

``records.split_batches`` / ``records.decode_batch`` on random bytes and on mutated valid
batches (bit flips, truncations, int32 field overwrites, inserted bytes; CRC recomputed or
not) return a valid result or raise ``BatchError`` - never anything else, never hang, and
never allocate much beyond ``max_decompressed`` (tracemalloc peak).
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import tracemalloc
from collections.abc import Iterator
from typing import Any

import cramjam
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.errors import BatchError, BatchTooLargeError, CorruptBatchError
from sparklog.kafka.records import HEADER_SIZE, DecodedBatch, decode_batch, split_batches
from tests.broker import raw_frames as rf

from .strategies import CODECS, MUTATIONS, PRODUCERS, RECORD, VALID_BATCHES, mutate, valid_batch

LIMIT = 64 * 1024  # max_decompressed for the in-process decode tests
MEMORY_SLACK = 512 * 1024
EXAMPLES = int(os.environ.get("SPARKLOG_FUZZ_EXAMPLES", "300"))  # per in-process property
FAST = settings(max_examples=EXAMPLES, deadline=None)


# ---------------------------------------------------------------------------- helpers


class Hang(BaseException):
    """Raised by ``time_limit``; a BaseException so no ``except Exception`` can eat it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def decode_bounded(raw: bytes, limit: int = LIMIT) -> tuple[DecodedBatch | BatchError, int]:
    """decode_batch's result or BatchError, and the peak of Python allocations it made."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with time_limit(5.0):
            try:
                result: DecodedBatch | BatchError = decode_batch(
                    memoryview(raw), max_decompressed=limit
                )
            except BatchError as e:
                result = e
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, peak


def check_decoded(result: DecodedBatch | BatchError, raw: bytes) -> None:
    if isinstance(result, BatchError):
        assert type(result) is not BatchError  # always one of its kinds (a subclass)
        return
    assert result.count == result.records.num_rows > 0
    assert result.wire_bytes == len(raw)
    assert result.records.schema.names[:4] == ["timestamp", "key", "value", "headers"]


def memory_bound(raw: bytes) -> int:
    return 4 * LIMIT + 64 * len(raw) + MEMORY_SLACK


# ---------------------------------------------------------------------------- batches


@FAST
@given(st.binary(max_size=4096))
def test_split_batches_random_bytes(blob: bytes) -> None:
    try:
        views = split_batches(blob)
    except BatchError:
        return
    assert b"".join(bytes(v) for v in views) == blob
    for v in views:
        assert v[16] == 2
        assert len(v) == 12 + struct.unpack_from(">i", v, 8)[0] >= HEADER_SIZE


@FAST
@given(st.lists(VALID_BATCHES, min_size=1, max_size=3), MUTATIONS)
def test_split_batches_mutated_valid_batches(batches: list[bytes], mutations: list) -> None:
    data = mutate(b"".join(batches), mutations)
    try:
        views = split_batches(data)
    except BatchError:
        return
    assert b"".join(bytes(v) for v in views) == data


@FAST
@given(st.lists(RECORD, min_size=1, max_size=12), CODECS, PRODUCERS)
def test_decode_batch_valid_batches_round_trip(records: list, codec: int, producer: tuple) -> None:
    """The generator behind the mutation tests makes batches that decode as built."""
    raw = valid_batch(records, codec, producer)
    result, _ = decode_bounded(raw, limit=1 << 20)
    assert isinstance(result, DecodedBatch), result
    assert result.records.column("key").to_pylist() == [r[0] for r in records]
    assert result.records.column("value").to_pylist() == [r[1] for r in records]
    assert result.producer_id == producer[0]


@FAST
@given(st.binary(min_size=HEADER_SIZE, max_size=2048), st.booleans())
def test_decode_batch_random_bytes(blob: bytes, fix_crc: bool) -> None:
    raw = rf.set_crc(blob) if fix_crc else blob
    result, peak = decode_bounded(raw)
    check_decoded(result, raw)
    assert peak < memory_bound(raw)


@settings(max_examples=2 * EXAMPLES, deadline=None)
@given(VALID_BATCHES, MUTATIONS, st.booleans())
def test_decode_batch_mutated_valid_batches(raw: bytes, mutations: list, fix_crc: bool) -> None:
    data = mutate(raw, mutations)
    if fix_crc and len(data) >= HEADER_SIZE:
        data = rf.set_crc(data)
    result, peak = decode_bounded(data)
    check_decoded(result, data)
    assert peak < memory_bound(data)


def _bomb(codec: int, size: int) -> bytes:
    """One record of ``size`` value bytes (zeros), compressed with ``codec``."""
    if codec in (1, 4):
        return rf.bomb_records(codec, size)
    plain = rf.one_record_prefix(size) + bytes(size) + b"\x00"
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(plain))
    return bytes(cramjam.lz4.compress(plain))


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([1, 2, 3, 4]),
    st.sampled_from([LIMIT // 2, LIMIT - 64, LIMIT + 1, 4 * LIMIT, 8 << 20]),
)
def test_decode_batch_compressed_size_is_bounded(codec: int, size: int) -> None:
    """A batch decodes iff its records fit ``max_decompressed``; past it, the refusal
    (too_large) costs no more memory than the limit allows."""
    raw = rf.raw_batch(_bomb(codec, size), codec=codec)
    result, peak = decode_bounded(raw)
    plain_size = len(rf.one_record_prefix(size)) + size + 1
    if plain_size <= LIMIT:
        assert isinstance(result, DecodedBatch), result
        assert result.records.column("value")[0].as_py() == bytes(size)
    else:
        assert isinstance(result, BatchTooLargeError), result
        assert peak < memory_bound(raw)


def test_decode_batch_gzip_garbage_is_batch_error() -> None:
    """BUG: ``_gzip_into`` lets zlib.error out (not a BatchError) for records that are not
    a gzip stream, so the produce handler's error mapping never sees it."""
    raw = rf.raw_batch(b"this is not a gzip member" * 4, codec=1)
    result, _ = decode_bounded(raw)
    assert isinstance(result, CorruptBatchError)


def test_decode_batch_snappy_negative_xerial_chunk_size_terminates() -> None:
    """BUG: a snappy (xerial) batch whose first chunk length is -4 makes ``_snappy`` loop
    forever (``pos += 4 + size`` never advances) while its ``blocks`` list grows without
    bound: one small produce request wedges the broker's event loop."""
    payload = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", -4)
    raw = rf.raw_batch(payload, codec=2)
    try:
        result, _ = decode_bounded(raw)
    except Hang as e:
        pytest.fail(f"decode_batch hangs on a negative xerial chunk size: {e}")
    assert isinstance(result, CorruptBatchError)


# ---------------------------------------------------------------------------- the C decoder


needs_c = pytest.mark.skipif(
    __import__("sparklog.kafka.records", fromlist=["_columns"])._columns is None,
    reason="sparklog._columns is not built",
)


def _both(raw: bytes) -> tuple[list[Any] | BatchError, list[Any] | BatchError]:
    """The columns ``sparklog._columns`` decodes and those aiokafka's codec decodes (or the
    BatchError each raised), for an uncompressed batch."""
    from sparklog.kafka import records as r

    head = struct.unpack_from(">qiibIhiqqqhii", raw, 0)
    attributes, base_ts, max_ts, count = head[5], head[7], head[8], head[12]
    section = memoryview(raw)[HEADER_SIZE:]
    out: list[list[Any] | BatchError] = []
    for decode in (
        lambda: r._native_columns(section, count, base_ts, (attributes >> 3) & 1, max_ts),
        lambda: r._record_columns(memoryview(raw), attributes, section, count),
    ):
        try:
            cols = decode()
            # timestamps as int64: a mutated one may lie beyond what datetime holds
            plain = [cols[0].view(pa.int64()), *cols[1:]] if cols is not None else None
            out.append([c.to_pylist() for c in plain] if plain is not None else None)  # type: ignore[arg-type]
        except BatchError as e:
            out.append(e)
    return out[0], out[1]


def test_the_c_decoder_is_built() -> None:
    """CI builds it (setup.sh installs gcc where it can); elsewhere a missing compiler is a
    skip that says so, as the broker then decodes through aiokafka's codec."""
    from sparklog.kafka import records

    if records._columns is None and not os.environ.get("CI"):
        pytest.skip("sparklog._columns is not built (no C compiler when setup.py ran)")
    assert records._columns is not None, "sparklog._columns was not compiled (setup.py)"


@needs_c
@FAST
@given(st.lists(RECORD, min_size=1, max_size=12), PRODUCERS, st.booleans())
def test_the_c_decoder_decodes_what_aiokafka_decodes(
    records: list, producer: tuple, log_append_time: bool
) -> None:
    raw = bytearray(valid_batch(records, 0, producer))
    if log_append_time:  # attributes bit 3, CRC recomputed
        struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | 8)
        raw = bytearray(rf.set_crc(bytes(raw)))
    native, codec = _both(bytes(raw))
    has_headers = any(r[2] for r in records)
    assert native == (None if has_headers else codec)


@needs_c
@settings(max_examples=2 * EXAMPLES, deadline=None)
@given(VALID_BATCHES, MUTATIONS)
def test_the_c_decoder_accepts_only_what_aiokafka_accepts(raw: bytes, mutations: list) -> None:
    data = mutate(raw, mutations)
    if len(data) < HEADER_SIZE or data[21] & 7:  # compressed: decompression is shared
        return
    native, codec = _both(data)
    if isinstance(native, list):
        assert native == codec  # accepted: the same records as aiokafka's decoder reads
    elif isinstance(native, BatchError):
        assert isinstance(native, CorruptBatchError)
