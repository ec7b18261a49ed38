"""Sparse per-segment indexes: offset index and time index.

File format of both: a sequence of 16-byte entries ``(key: int64 LE, value: int64 LE)``
with keys and values nondecreasing; no header. The files are derived data: written next to
their segment (``<segment file>.index``, ``<segment file>.timeindex``), never fsynced on
the append path, checked when loaded, verified again when used, and rebuilt from the
segment whenever missing or inconsistent. Not thread-safe.

Offset index: ``(offset, position)`` = the batch (active segment: byte position of its
frame) or row group (sealed segment: row-group number) at ``position`` starts at ``offset``.
``floor(o)`` gives where to start reading for offset ``o``.

Time index: ``(max_timestamp, offset)`` = every record of the segment with an offset below
``offset`` has a timestamp <= ``max_timestamp``. For a target time ``t``, the last entry with
``max_timestamp < t`` gives an offset before which no record can have a timestamp >= ``t``,
so the search for the first such record starts there (timestamps need not be monotonic).
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from typing import Self

from sparklog.storage.fs import FileSystem

ENTRY_SIZE = 16


class SparseIndex:
    """Sorted ``(key, value)`` int64 pairs; see the module docstring."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: array[int] | None = None, values: array[int] | None = None) -> None:
        self.keys: array[int] = keys if keys is not None else array("q")
        self.values: array[int] = values if values is not None else array("q")

    def __len__(self) -> int:
        return len(self.keys)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SparseIndex)
            and self.keys == other.keys
            and self.values == other.values
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(zip(self.keys, self.values, strict=True))})"

    def append(self, key: int, value: int) -> bytes:
        """Add an entry in memory; return its 16 bytes for the caller to append to the file."""
        if self.keys and (key < self.keys[-1] or value < self.values[-1]):
            raise ValueError(
                f"index entry ({key}, {value}) is below the last ({self.keys[-1]}, "
                f"{self.values[-1]})"
            )
        self.keys.append(key)
        self.values.append(value)
        return struct.pack("<qq", key, value)

    def to_bytes(self) -> bytes:
        inter = array("q", [0]) * (2 * len(self.keys))
        inter[0::2] = self.keys
        inter[1::2] = self.values
        if sys.byteorder != "little":
            inter.byteswap()
        return inter.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Self | None:
        """Parse an index file; None if it is structurally invalid (then rebuild it)."""
        if len(data) % ENTRY_SIZE:
            return None
        inter = array("q")
        inter.frombytes(data)
        if sys.byteorder != "little":
            inter.byteswap()
        keys, values = inter[0::2], inter[1::2]
        for i in range(1, len(keys)):
            if keys[i] < keys[i - 1] or values[i] < values[i - 1]:
                return None
        return cls(keys, values)

    @classmethod
    def load(cls, fs: FileSystem, path: str) -> Self | None:
        try:
            return cls.from_bytes(fs.read_bytes(path))
        except FileNotFoundError:
            return None

    def floor(self, key: int) -> tuple[int, int] | None:
        """The last entry with ``entry.key <= key``."""
        i = bisect.bisect_right(self.keys, key)
        return (self.keys[i - 1], self.values[i - 1]) if i else None

    def last_below(self, key: int) -> tuple[int, int] | None:
        """The last entry with ``entry.key < key``."""
        i = bisect.bisect_left(self.keys, key)
        return (self.keys[i - 1], self.values[i - 1]) if i else None

    def truncate_values_to(self, limit: int) -> None:
        """Drop entries whose value is >= ``limit`` (a truncated active segment)."""
        i = bisect.bisect_left(self.values, limit)
        del self.keys[i:]
        del self.values[i:]

    def truncate_keys_to(self, limit: int) -> None:
        """Drop entries whose key is >= ``limit``."""
        i = bisect.bisect_left(self.keys, limit)
        del self.keys[i:]
        del self.values[i:]


class OffsetIndex(SparseIndex):
    """Entries ``(offset, position)``; see the module docstring."""

    def lookup(self, offset: int) -> tuple[int, int] | None:
        return self.floor(offset)


class TimeIndex(SparseIndex):
    """Entries ``(max_timestamp, offset)``; see the module docstring."""

    def lookup(self, timestamp: int) -> int | None:
        """An offset before which no record has a timestamp >= ``timestamp``."""
        e = self.last_below(timestamp)
        return e[1] if e else None
