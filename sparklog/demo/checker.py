"""A Jepsen-style checker of a produce/consume history against a partitioned log.

The history a fault test records:
- ``sends``: every record sent, in send order per producer: ``(producer, key, value)``;
  values are unique across the history;
- ``acked``: value -> ``(partition, offset)`` for every send the broker acknowledged
  (offset -1: acknowledged without one, as librdkafka reports a DUPLICATE_SEQUENCE_NUMBER
  answer; such a value is checked for loss and duplication, not for its offset);
- ``failed``: values whose send ended in an error (they may or may not be in the log: an
  *unknown* outcome, Jepsen's ``:info``);
- ``reads``: what consumers read, ``(consumer, partition, offset, value)`` in the order
  each consumer read it.

Anomalies (each must be zero):
- **lost**: an acknowledged value no consumer read;
- **duplicate**: a value stored at two or more offsets;
- **inconsistent**: a value read at another offset than it was acknowledged with, or two
  different values read at one offset;
- **nonmonotonic**: a consumer reading a partition's offsets not strictly increasing;
- **skipped**: a consumer's next offset of a partition past an offset that exists in the
  log (some consumer read it) and that it never read (it jumped over data);
- **reordered**: two acknowledged sends of one producer with the same key, stored in the
  opposite order of their sends (same partition, later send at a smaller offset).
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field

Value = Hashable
MAX_EXAMPLES = 5


@dataclass
class History:
    sends: list[tuple[Hashable, Hashable, Value]] = field(default_factory=list)
    acked: dict[Value, tuple[int, int]] = field(default_factory=dict)
    failed: set[Value] = field(default_factory=set)
    reads: list[tuple[Hashable, int, int, Value]] = field(default_factory=list)


@dataclass
class Report:
    ok: int = 0
    failed: int = 0
    unknown: int = 0
    read: int = 0
    unplaced: int = 0  # acknowledged without an offset: checked for loss, not placement
    anomalies: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[object]] = field(default_factory=dict)

    def add(self, kind: str, example: object) -> None:
        self.anomalies[kind] = self.anomalies.get(kind, 0) + 1
        ex = self.examples.setdefault(kind, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(example)

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> str:
        kinds = ("lost", "duplicate", "inconsistent", "nonmonotonic", "skipped", "reordered")
        counts = ", ".join(f"{k} {self.anomalies.get(k, 0)}" for k in kinds)
        return (
            f"ops ok {self.ok} ({self.unplaced} without an offset), failed {self.failed}, "
            f"unknown {self.unknown}, read {self.read}; anomalies: {counts}"
            + ("" if self.valid else f"; e.g. {self.examples}")
        )


def check(h: History) -> Report:
    r = Report(ok=len(h.acked), failed=len(h.failed - set(h.acked)))
    r.unknown = r.failed
    stored: dict[Value, set[tuple[int, int]]] = defaultdict(set)
    at: dict[tuple[int, int], set[Value]] = defaultdict(set)
    for _c, p, o, v in h.reads:
        stored[v].add((p, o))
        at[(p, o)].add(v)
    r.read = len(stored)
    for v, where in h.acked.items():
        if v not in stored:
            r.add("lost", (v, where))
        elif where[1] < 0:  # acknowledged without an offset (a DUPLICATE_SEQUENCE_NUMBER)
            r.unplaced += 1
        elif stored[v] != {where}:
            r.add("inconsistent", (v, "acked at", where, "read at", sorted(stored[v])))
    for v, places in stored.items():
        if len(places) > 1:
            r.add("duplicate", (v, sorted(places)))
    for pos, vs in at.items():
        if len(vs) > 1:
            r.add("inconsistent", (pos, "holds", sorted(map(str, vs))))
    existing: dict[int, list[int]] = defaultdict(list)
    for p, o in sorted(at):
        existing[p].append(o)
    last: dict[tuple[Hashable, int], int] = {}
    for c, p, o, _v in h.reads:
        prev = last.get((c, p))
        if prev is not None:
            if o <= prev:
                r.add("nonmonotonic", (c, p, prev, o))
            else:
                offs = existing[p]
                between = _count_between(offs, prev, o)
                if between:
                    r.add("skipped", (c, p, prev, o, f"{between} stored offsets between"))
        last[(c, p)] = o
    by_key: dict[tuple[Hashable, Hashable], list[tuple[int, int]]] = defaultdict(list)
    for producer, key, v in h.sends:
        if v in h.acked and h.acked[v][1] >= 0:
            by_key[(producer, key)].append(h.acked[v])
    for (producer, key), sent in by_key.items():
        for (p1, o1), (p2, o2) in itertools.pairwise(sent):
            if p1 == p2 and o2 < o1:
                r.add("reordered", (producer, key, (p1, o1), (p2, o2)))
    return r


def _count_between(sorted_offsets: list[int], lo: int, hi: int) -> int:
    """How many of ``sorted_offsets`` lie strictly between ``lo`` and ``hi``."""
    return bisect.bisect_left(sorted_offsets, hi) - bisect.bisect_right(sorted_offsets, lo)
