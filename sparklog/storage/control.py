"""The record attribute bits storage keeps (Kafka's batch attribute bits that describe a
record) and the layout of control records, Kafka's transaction markers::

    attributes   0x07 the codec the producer compressed the record's batch with (Kafka's:
                 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), 0x10 transactional, 0x20 control
    control key  version i16 (=0) | type i16 (0 abort, 1 commit)      big-endian
    control value version i16 (=0) | coordinator epoch i32

A module of its own so that both the record schema (``sparklog.storage.records``) and the
producer state rebuilt from records (``sparklog.storage.producers``) use it.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

CODEC_MASK = 0x07
TRANSACTIONAL = 0x10
CONTROL = 0x20
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def control_key(kind: int) -> bytes:
    return _KEY.pack(0, kind)


def control_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(0, coordinator_epoch)


def control_type(key: bytes | None) -> int:
    """A control record's type (``CONTROL_ABORT``, ``CONTROL_COMMIT``) from its key; -1
    for a key that is not a control key."""
    if key is None or len(key) < _KEY.size:
        return -1
    return int(_KEY.unpack_from(key)[1])


def any_transactional(attributes: pa.Array | pa.ChunkedArray) -> bool:
    """Whether any record of an ``attributes`` column is transactional or a control record:
    one min/max kernel, because both bits lie above the codec bits (a compressed produce
    batch, codec bits only, stays below ``TRANSACTIONAL``)."""
    top = pc.max(attributes).as_py()
    return top is not None and top >= TRANSACTIONAL
