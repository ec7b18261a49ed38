"""Which broker leads which partition: the controller's pure planner, and its etcd form.

``plan(partitions, live, current)`` returns the assignments that must change, each with
its leader epoch bumped (``leader_epoch + 1``; a new partition starts at 0), so a
controller writes exactly those in one fenced transaction (``Coordination.fenced``). The
rules, in order:

1. With no live broker nothing changes (the partitions are offline until one returns).
2. A partition without an assignment, or whose leader is not live, goes to the live
   broker leading the fewest partitions of its topic (ties: the fewest in all, then the
   lowest node id).
3. Then, for each topic, while one live broker leads two or more of its partitions more
   than another, one moves from the former to the latter: preferably one whose first
   replica (its preferred leader) is the latter, else the last in partition order.
4. Then, while the most loaded live broker leads two or more partitions more than the
   least loaded, one partition moves from the former to the latter, of a topic the former
   leads more of than the latter (so each topic stays within one), chosen as in rule 3.

So every topic's leaders are spread evenly, and the totals too, and a broker that joins
(or comes back) takes its share - its own preferred partitions first. Balancing the totals
alone is not enough: the internal topics (16 partitions, created when the first broker
starts, alone) would leave a user topic's partitions all on whichever broker led the
fewest internal ones.

Replicas: the data is on shared storage, so every broker can serve a partition's reads;
``replicas`` (up to ``REPLICAS``) starts with the preferred leader (where the partition
was first placed; it may be down), then the leader and the next live brokers by node id:
the brokers follower fetches and Kafka's tools are pointed at. An unchanged leader keeps
its replicas.

etcd value of ``partitions/<topic>/<partition>``: ``{"leader", "leader_epoch",
"replicas"}`` (JSON).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass

REPLICAS = 3
Partition = tuple[str, int]


@dataclass(frozen=True)
class Assignment:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]

    def to_json(self) -> bytes:
        body = {"leader": self.leader, "leader_epoch": self.leader_epoch}
        return json.dumps({**body, "replicas": list(self.replicas)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Assignment:
        d = json.loads(data)
        return cls(int(d["leader"]), int(d["leader_epoch"]), tuple(int(r) for r in d["replicas"]))


class _Spread:
    """Who leads what while ``plan`` works: leaders, and the counts per broker in all and
    per topic."""

    def __init__(self, brokers: list[int], current: dict[Partition, Assignment]) -> None:
        self.current = current
        self.leader: dict[Partition, int] = {}
        self.led: dict[int, list[Partition]] = {b: [] for b in brokers}
        self.total = dict.fromkeys(brokers, 0)
        self.per_topic: dict[tuple[str, int], int] = {}

    def of(self, topic: str, broker: int) -> int:
        return self.per_topic.get((topic, broker), 0)

    def lead(self, p: Partition, broker: int) -> None:
        old = self.leader.get(p)
        if old is not None:
            self.led[old].remove(p)
            self.total[old] -= 1
            self.per_topic[(p[0], old)] -= 1
        self.leader[p] = broker
        bisect.insort(self.led[broker], p)
        self.total[broker] += 1
        self.per_topic[(p[0], broker)] = self.of(p[0], broker) + 1

    def move(self, candidates: list[Partition], to: int) -> None:
        """Moves one of ``candidates`` (in (topic, partition) order) to ``to``: the first
        whose preferred leader ``to`` is, else the last."""
        mine = [
            p for p in candidates if p in self.current and self.current[p].replicas[:1] == (to,)
        ]
        self.lead(mine[0] if mine else candidates[-1], to)


def _replicas(leader: int, live: list[int]) -> tuple[int, ...]:
    at = live.index(leader)
    return tuple((live[at:] + live[:at])[: min(REPLICAS, len(live))])


def plan(
    partitions: Iterable[Partition], live: Iterable[int], current: dict[Partition, Assignment]
) -> dict[Partition, Assignment]:
    """The assignments to write (see the module docstring)."""
    brokers = sorted(set(live))
    parts = sorted(set(partitions))
    if not brokers:
        return {}
    spread = _Spread(brokers, current)
    for p in parts:  # keeps its live leader
        if p in current and current[p].leader in spread.total:
            spread.lead(p, current[p].leader)
    for p in parts:  # rule 2: unassigned, or led by a broker that is gone
        if p not in spread.leader:
            spread.lead(p, min(brokers, key=lambda b: (spread.of(p[0], b), spread.total[b], b)))
    for topic in sorted({t for t, _ in parts}):  # rule 3: each topic spread evenly
        while True:
            src = max(brokers, key=lambda b: (spread.of(topic, b), spread.total[b], b))
            dst = min(brokers, key=lambda b: (spread.of(topic, b), spread.total[b], b))
            if spread.of(topic, src) - spread.of(topic, dst) < 2:
                break
            spread.move([p for p in spread.led[src] if p[0] == topic], dst)
    while True:  # rule 4: the totals spread evenly, each topic staying so
        src = max(brokers, key=lambda b: (spread.total[b], -b))
        dst = min(brokers, key=lambda b: (spread.total[b], b))
        if spread.total[src] - spread.total[dst] < 2:
            break
        # such a partition exists: the totals differ, so some topic's counts do, and by
        # one (rule 3), so the move leaves that topic within one too
        led = [p for p in spread.led[src] if spread.of(p[0], src) > spread.of(p[0], dst)]
        spread.move(led, dst)
    leader = spread.leader
    changes = {}
    for p in parts:
        old = current.get(p)
        if old is not None and old.leader == leader[p]:
            continue
        epoch = old.leader_epoch + 1 if old is not None else 0
        # the preferred leader stays first (a new partition's is where it starts), so the
        # partition can move back to it when it returns
        pref = old.replicas[0] if old is not None else leader[p]
        others = (r for r in _replicas(leader[p], brokers) if r != pref)
        changes[p] = Assignment(leader[p], epoch, (pref, *others)[:REPLICAS])
    return changes
