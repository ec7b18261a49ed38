"""Hypothesis strategies for fuzzing the Kafka codec and framing: valid record batches
(``VALID_BATCHES``), byte mutations of anything (``mutate``, ``MUTATIONS``) and request
frames, random-bodied or mutated from valid ones (``RANDOM_BODY_REQUESTS``,
``MUTATED_REQUESTS``; ``supported`` keeps those whose key and version the broker serves)."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import strategies as st

from sparklog.broker.apis import APIS
from sparklog.kafka.records import build_batch
from tests.broker import raw_frames as rf

RECORD = st.tuples(
    st.none() | st.binary(max_size=24),
    st.none() | st.binary(max_size=400),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
)
PRODUCERS = st.sampled_from([(-1, -1, -1), (7, 0, 0), (123456789, 3, 2**31 - 5)])
CODECS = st.sampled_from([0, 1, 2, 3, 4])


def valid_batch(records: list[tuple[Any, Any, Any]], codec: int, producer: tuple) -> bytes:
    pid, epoch, seq = producer
    rows = ((i, 1_700_000_000_000 + i, k, v, h) for i, (k, v, h) in enumerate(records))
    return build_batch(rows, codec=codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


VALID_BATCHES = st.builds(valid_batch, st.lists(RECORD, min_size=1, max_size=12), CODECS, PRODUCERS)

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


def supported(frame: bytes) -> bool:
    if len(frame) < 4:
        return True  # peek_head must refuse it with FrameError
    key, version = struct.unpack_from(">hh", frame, 0)
    return key in APIS and APIS[key].min_version <= version <= APIS[key].max_version
