"""The controller's planner: even spread, failover off dead brokers, rebalance on join."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.cluster.assignment import Assignment, plan


def parts(n: int, topic: str = "t") -> list[tuple[str, int]]:
    return [(topic, i) for i in range(n)]


def apply(current: dict, changes: dict) -> dict:
    return {**current, **changes}


def loads(a: dict) -> Counter:
    return Counter(x.leader for x in a.values())


def test_new_partitions_are_spread_evenly_at_epoch_0() -> None:
    a = plan(parts(7), [1, 2, 3], {})
    assert sorted(loads(a).values()) == [2, 2, 3]
    assert {x.leader_epoch for x in a.values()} == {0}
    assert all(x.replicas[0] == x.leader and len(x.replicas) == 3 for x in a.values())


def test_a_dead_brokers_partitions_move_with_their_epoch_bumped() -> None:
    a = plan(parts(6), [1, 2, 3], {})
    changes = plan(parts(6), [1, 3], a)
    assert set(changes) == {p for p, x in a.items() if x.leader == 2}  # only those move
    for p, x in changes.items():
        assert x.leader in (1, 3) and x.leader_epoch == a[p].leader_epoch + 1
        assert x.replicas[0] == 2  # still its preferred leader
    assert sorted(loads(apply(a, changes)).values()) == [3, 3]


def test_a_broker_that_returns_takes_its_preferred_partitions_back() -> None:
    a = plan(parts(6), [1, 2, 3], {})
    a = apply(a, plan(parts(6), [1, 3], a))
    back = plan(parts(6), [1, 2, 3], a)
    after = apply(a, back)
    assert sorted(loads(after).values()) == [2, 2, 2]
    assert all(x.leader == 2 for x in back.values())
    assert all(after[p].replicas[0] == 2 for p in back)  # its own, preferred ones


def test_a_topic_created_after_the_internal_ones_is_spread_over_every_broker() -> None:
    # the first broker starts alone and creates the internal topics; the others join; then
    # a user topic is created: the totals alone would put all of it on one broker
    internal = parts(8, "__consumer_offsets") + parts(8, "__transaction_state")
    a = plan(internal, [1], {})
    a = apply(a, plan(internal, [1, 2], a))
    a = apply(a, plan(internal, [1, 2, 3], a))
    everything = internal + parts(4, "events")
    a = apply(a, plan(everything, [1, 2, 3], a))
    events = Counter(a[p].leader for p in parts(4, "events"))
    assert sorted(events.values()) == [1, 1, 2]
    assert sorted(loads(a).values()) == [6, 7, 7]


def test_a_returning_broker_takes_back_a_share_of_every_topic() -> None:
    everything = parts(8, "__consumer_offsets") + parts(1, "_schemas") + parts(4, "events")
    a = plan(everything, [1, 2, 3], {})
    a = apply(a, plan(everything, [2, 3], a))
    back = plan(everything, [1, 2, 3], a)
    assert {p[0] for p in back} == {"__consumer_offsets", "events"}
    assert all(x.leader == 1 and x.replicas[0] == 1 for x in back.values())


def test_nothing_changes_without_live_brokers_or_when_balanced() -> None:
    a = plan(parts(4), [1, 2], {})
    assert plan(parts(4), [], a) == {}
    assert plan(parts(4), [1, 2], a) == {}


def test_assignments_round_trip_as_json() -> None:
    x = Assignment(3, 7, (2, 3, 1))
    assert Assignment.from_json(x.to_json()) == x


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 20), min_size=1, max_size=4),
    st.lists(st.sets(st.integers(1, 6), min_size=0, max_size=6), min_size=1, max_size=6),
)
def test_any_sequence_of_membership_changes_keeps_the_invariants(
    sizes: list[int], memberships: list[set[int]]
) -> None:
    every = [p for i, n in enumerate(sizes) for p in parts(n, f"t{i}")]
    current: dict = {}
    for step, live in enumerate(memberships):
        topics = every if step else every[: sizes[0]]  # the first topic is there alone first
        changes = plan(topics, live, current)
        for p, x in changes.items():  # every change bumps the epoch
            assert x.leader_epoch == (current[p].leader_epoch + 1 if p in current else 0)
            assert x.leader in x.replicas
        current = apply(current, changes)
        if live:
            assert all(current[p].leader in live for p in topics)  # no partition on a dead one
            counts = [loads(current).get(b, 0) for b in live]
            assert max(counts) - min(counts) <= 1  # spread evenly
            for i in range(len(sizes) if step else 1):  # and each topic too
                of = Counter(current[p].leader for p in parts(sizes[i], f"t{i}"))
                assert max(of.get(b, 0) for b in live) - min(of.get(b, 0) for b in live) <= 1
            assert plan(topics, live, current) == {}  # stable: nothing more to move
