"""The record attribute bits storage keeps (Kafka's batch attribute bits that describe a
record) and the layout of control records, Kafka's transaction markers::

    attributes   0x10 transactional, 0x20 control
    control key  version i16 (=0) | type i16 (0 abort, 1 commit)      big-endian
    control value version i16 (=0) | coordinator epoch i32

A module of its own so that both the record schema (``sparklog.storage.records``) and the
producer state rebuilt from records (``sparklog.storage.producers``) use it.
"""

from __future__ import annotations

import struct

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
