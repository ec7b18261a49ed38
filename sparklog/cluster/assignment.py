"""Which broker leads which partition: the controller's pure planner, and its etcd form.

``plan(partitions, live, current)`` returns the assignments that must change, each with
its leader epoch bumped (``leader_epoch + 1``; a new partition starts at 0), so a
controller writes exactly those in one fenced transaction (``Coordination.fenced``). The
rules, in order:

1. With no live broker nothing changes (the partitions are offline until one returns).
2. A partition without an assignment, or whose leader is not live, goes to the live
   broker leading the fewest partitions (ties: the lowest node id).
3. Then, while the most loaded live broker leads two or more partitions more than the
   least loaded, one partition moves from the former to the latter: preferably one whose
   first replica (its preferred leader) is the latter, else the last in (topic,
   partition) order. So leaders are spread evenly, and a broker that joins (or comes
   back) takes its share - its own preferred partitions first.

Replicas: the data is on shared storage, so every broker can serve a partition's reads;
``replicas`` (up to ``REPLICAS``) starts with the preferred leader (where the partition
was first placed; it may be down), then the leader and the next live brokers by node id:
the brokers follower fetches and Kafka's tools are pointed at. An unchanged leader keeps
its replicas.

etcd value of ``partitions/<topic>/<partition>``: ``{"leader", "leader_epoch",
"replicas"}`` (JSON).
"""

from __future__ import annotations

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
    leader = {p: current[p].leader for p in parts if p in current}
    load = {b: 0 for b in brokers}
    for p in parts:
        if leader.get(p) in load:
            load[leader[p]] += 1
    for p in parts:  # rule 2: unassigned, or led by a broker that is gone
        if leader.get(p) not in load:
            target = min(brokers, key=lambda b: (load[b], b))
            leader[p] = target
            load[target] += 1
    while True:  # rule 3: spread evenly
        most = max(brokers, key=lambda b: (load[b], -b))
        least = min(brokers, key=lambda b: (load[b], b))
        if load[most] - load[least] < 2:
            break
        led = [p for p in parts if leader[p] == most]
        preferred = [p for p in led if p in current and current[p].replicas[:1] == (least,)]
        move = preferred[0] if preferred else led[-1]
        leader[move] = least
        load[most] -= 1
        load[least] += 1
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
