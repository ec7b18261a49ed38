"""Hypothesis fuzzing of the broker's decoders, in process, and of a live broker's framing.

Contracts checked:

* ``batches.split_batches`` / ``batches.decode_batch`` on random bytes and on mutated valid
  batches (bit flips, truncations, int32 field overwrites, inserted bytes; CRC recomputed
  or not) return a valid result or raise ``BatchError`` - never anything else, never hang,
  and never allocate much beyond ``max_decompressed`` (tracemalloc peak).
* ``wire.parse_request`` on random and mutated frames returns or raises ``FrameError``.
  kio parses in native code, and a native crash would take pytest down with it, so these
  run in a sandbox child process (address space capped at 2 GiB so that an oversized
  allocation fails the same way on every machine); a dead child is a failed example.
* A live broker fed garbage frames keeps answering ApiVersions on a new connection.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cramjam
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sparklog.broker import wire
from sparklog.broker.apis import APIS
from sparklog.broker.batches import (
    HEADER_SIZE,
    BatchError,
    DecodedBatch,
    decode_batch,
    split_batches,
)

from . import raw_frames as rf
from .conftest import ROOT, BrokerProcess

LIMIT = 64 * 1024  # max_decompressed for the in-process decode tests
MEMORY_SLACK = 512 * 1024
EXAMPLES = int(os.environ.get("SPARKLOG_FUZZ_EXAMPLES", "300"))  # per in-process property
FAST = settings(max_examples=EXAMPLES, deadline=None)
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


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
        assert result.kind in {"corrupt", "magic", "too_large", "invalid", "unsupported"}
        return
    assert result.count == result.records.num_rows > 0
    assert result.wire_bytes == len(raw)
    assert result.records.schema.names[:4] == ["timestamp", "key", "value", "headers"]


def memory_bound(raw: bytes) -> int:
    return 4 * LIMIT + 64 * len(raw) + MEMORY_SLACK


# ---------------------------------------------------------------------------- strategies

RECORD = st.tuples(
    st.none() | st.binary(max_size=24),
    st.none() | st.binary(max_size=400),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
)
PRODUCERS = st.sampled_from([(-1, -1, -1), (7, 0, 0), (123456789, 3, 2**31 - 5)])
CODECS = st.sampled_from([0, 1, 2, 3, 4])


def build_batch(records: list[tuple[Any, Any, Any]], codec: int, producer: tuple) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    pid, epoch, seq = producer
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=10**9,
    )
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, 1_700_000_000_000 + i, key, value, headers)
    return bytes(builder.build())


VALID_BATCHES = st.builds(build_batch, st.lists(RECORD, min_size=1, max_size=12), CODECS, PRODUCERS)

# batch v2 fields worth hitting: batchLength, epoch, lastOffsetDelta, producerId, count,
# the first record / xerial snappy header, the first xerial chunk size
BATCH_INT32_AT = [8, 12, 23, 43, 57, 61, 77]
INT32S = st.sampled_from([0, 1, -1, 49, 2**31 - 1, -(2**31), 1 << 20]) | st.integers(
    -(2**31), 2**31 - 1
)
POSITION = st.integers(0, 2**16)
MUTATION = st.one_of(
    st.tuples(st.just("flip"), POSITION, st.integers(0, 7)),
    st.tuples(st.just("truncate"), POSITION),
    st.tuples(st.just("int32"), st.sampled_from(BATCH_INT32_AT) | POSITION, INT32S),
    st.tuples(st.just("overwrite"), POSITION, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("insert"), POSITION, st.binary(min_size=1, max_size=16)),
)
MUTATIONS = st.lists(MUTATION, min_size=1, max_size=4)


def mutate(data: bytes, mutations: list[tuple[Any, ...]]) -> bytes:
    buf = bytearray(data)
    for m in mutations:
        if not buf:
            break
        kind, pos = m[0], m[1] % len(buf)
        if kind == "flip":
            buf[pos] ^= 1 << m[2]
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "int32":
            if pos + 4 <= len(buf):
                struct.pack_into(">i", buf, pos, m[2])
        elif kind == "overwrite":
            buf[pos : pos + len(m[2])] = m[2]
        else:
            buf[pos:pos] = m[2]
    return bytes(buf)


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
    raw = build_batch(records, codec, producer)
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
        assert isinstance(result, BatchError) and result.kind == "too_large", result
        assert peak < memory_bound(raw)


def test_decode_batch_gzip_garbage_is_batch_error() -> None:
    """BUG: ``_gzip_into`` lets zlib.error out (not a BatchError) for records that are not
    a gzip stream, so the produce handler's error mapping never sees it."""
    raw = rf.raw_batch(b"this is not a gzip member" * 4, codec=1)
    result, _ = decode_bounded(raw)
    assert isinstance(result, BatchError) and result.kind == "corrupt"


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
    assert isinstance(result, BatchError) and result.kind == "corrupt"


# ---------------------------------------------------------------------------- requests

SANDBOX = r"""
import resource, struct, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from sparklog.broker import wire
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    frame = inp.read(struct.unpack(">I", head)[0])
    try:
        wire.parse_request(frame)
        res = "ok"
    except wire.FrameError:
        res = "frame-error"
    except BaseException as e:
        res = f"other {type(e).__module__}.{type(e).__qualname__}: {str(e)[:300]}"
    data = res.encode()
    out.write(struct.pack(">I", len(data)) + data)
    out.flush()
"""


class ParseSandbox:
    """``wire.parse_request`` in a child process: a native crash is an answer, not the end
    of the test run."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_BACKTRACE": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SANDBOX],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        return self.proc

    def parse(self, frame: bytes) -> str:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(struct.pack(">I", len(frame)) + frame)
            proc.stdin.flush()
            head = proc.stdout.read(4)
        except BrokenPipeError:
            head = b""
        if len(head) < 4:
            return self._crashed(proc)
        return proc.stdout.read(struct.unpack(">I", head)[0]).decode()

    def _crashed(self, proc: subprocess.Popen[bytes]) -> str:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        tail = proc.stderr.read().decode(errors="replace").strip().splitlines()[:3]
        self.proc = None
        return f"crash: exit {proc.returncode}: {' | '.join(tail)}"

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for f in (self.proc.stdout, self.proc.stderr):
                if f is not None:
                    f.close()
            self.proc = None


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ParseSandbox]:
    s = ParseSandbox()
    try:
        yield s
    finally:
        s.close()


SUPPORTED = sorted(
    (key, v) for key, api in APIS.items() for v in range(api.min_version, api.max_version + 1)
)


def _valid_requests() -> list[bytes]:
    batch = rf.record_batch([b"v1", b"v2"], codec=1)
    creatable = {
        "name": "fuzz",
        "num_partitions": 3,
        "replication_factor": 1,
        "assignments": [{"partition_index": 0, "broker_ids": [0, 1]}],
        "configs": [{"name": "retention.ms", "value": "1000"}],
    }
    out = [
        rf.request_payload(18, 0, {}),
        rf.request_payload(18, 3, rf.api_versions_body(3)),
        rf.request_payload(3, 1, {"topics": [{"name": "a"}, {"name": "bb"}]}),
        rf.request_payload(
            3,
            12,
            {
                "topics": [{"topic_id": None, "name": "a"}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        ),
        rf.request_payload(19, 2, {"topics": [creatable], "timeout": 1000, "validate_only": True}),
        rf.request_payload(19, 7, {"topics": [creatable], "timeout": 1000, "validate_only": True}),
    ]
    out += [rf.request_payload(0, v, rf.produce_body("fuzz", 1, batch)) for v in (3, 9)]
    return out


VALID_REQUESTS = _valid_requests()
RANDOM_BODY_REQUESTS = st.builds(
    lambda kv, body: rf.header_bytes(*kv) + body,
    st.sampled_from(SUPPORTED),
    st.binary(max_size=256),
)
MUTATED_REQUESTS = st.builds(mutate, st.sampled_from(VALID_REQUESTS), MUTATIONS)


def _supported(frame: bytes) -> bool:
    if len(frame) < 4:
        return True  # peek_head must refuse it with FrameError
    key, version = struct.unpack_from(">hh", frame, 0)
    return key in APIS and APIS[key].min_version <= version <= APIS[key].max_version


@settings(max_examples=EXAMPLES, deadline=None, phases=NO_SHRINK)
@given(RANDOM_BODY_REQUESTS)
def test_parse_request_random_bodies(sandbox: ParseSandbox, frame: bytes) -> None:
    assert sandbox.parse(frame) in {"ok", "frame-error"}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(MUTATED_REQUESTS.filter(_supported))
def test_parse_request_mutated_valid_requests(sandbox: ParseSandbox, frame: bytes) -> None:
    """Frames whose key and version the broker supports (it refuses others before parsing)."""
    assert sandbox.parse(frame) in {"ok", "frame-error"}


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (3, 12, b"\xff\xff\xff\xff\x0f" + bytes(30)),  # compact array: 2^32 - 2 topics
        (3, 1, b"\x7f\xff\xff\xff" + bytes(30)),  # int32 array: 2^31 - 1 topics
        (19, 7, b"\xff\xff\xff\xff\x0f"),  # CreateTopics v7: 2^32 - 2 topics
    ],
    ids=["metadata-v12-compact", "metadata-v1-int32", "create-topics-v7-compact"],
)
def test_parse_request_huge_array_count_is_frame_error(
    sandbox: ParseSandbox, key: int, version: int, body: bytes
) -> None:
    """BUG (kio native reader, rust/src/schema.rs ``read_field``): an array count is
    used as ``Vec::with_capacity(n)`` before any element is read, so a 40-byte frame asks
    for 16-32 GiB and the process aborts (Rust OOM) instead of raising FrameError."""
    assert sandbox.parse(rf.header_bytes(key, version) + body) == "frame-error"


@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x00\x12\x00", b"\x00\x12\x00\x00\x00\x00"])
def test_parse_request_shorter_than_a_header_is_frame_error(frame: bytes) -> None:
    with pytest.raises(wire.FrameError):
        wire.parse_request(frame)


@pytest.mark.parametrize(("key", "version"), [(999, 0), (-1, 0), (0, 2), (0, 99), (18, 99)])
def test_parse_request_unknown_key_or_version_is_frame_error(key: int, version: int) -> None:
    """``parse_request`` has no schema for these; the server checks APIS before calling it,
    so this is latent - but callers are promised FrameError for unparsable frames."""
    with pytest.raises(wire.FrameError):
        wire.parse_request(struct.pack(">hhih", key, version, 1, -1) + bytes(16))


# ---------------------------------------------------------------------------- live broker


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = Path(tmp_path_factory.mktemp("fuzz-broker")) / "data"
    b = BrokerProcess(str(data)).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


GARBAGE_FRAMES = st.one_of(
    st.binary(max_size=512),
    RANDOM_BODY_REQUESTS,
    MUTATED_REQUESTS,
)


@settings(max_examples=50, deadline=None, phases=NO_SHRINK)
@given(GARBAGE_FRAMES)
def test_live_broker_survives_garbage_frames(fuzz_broker: BrokerProcess, payload: bytes) -> None:
    if not fuzz_broker.alive:  # an earlier example killed it: start afresh for this one
        fuzz_broker.restart()
    with rf.RawConnection(fuzz_broker.port) as conn:
        conn.send(rf.sized(payload))
        with contextlib.suppress(TimeoutError, OSError):
            conn.recv_frame(timeout=1.0)  # a response, a close, or (acks=0) silence
    assert fuzz_broker.alive, "broker died:\n" + "\n".join(fuzz_broker.lines[-5:])
    rf.check_api_versions(fuzz_broker.port)


def test_gzip_helper_streams_a_valid_gzip_member() -> None:
    """The bomb helper's gzip output is one complete gzip member (so a refusal is the
    broker's limit, not a corrupt stream)."""
    data = rf.bomb_records(1, 3 << 20)
    d = zlib.decompressobj(wbits=47)
    assert len(d.decompress(data)) > 3 << 20
    assert d.eof
