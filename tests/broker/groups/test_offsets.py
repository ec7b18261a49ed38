"""Committed offsets: where a group resumes, what survives a broker restart, and which
commits the coordinator refuses.

Members are real clients in child processes (``helpers.Member``), committing each record
synchronously after processing it. Protocol-level checks (stale generation, unknown member,
standalone commits, CompletingRebalance, DeleteGroups) use the raw kio client, one blocking
connection per member, so the test decides exactly what is sent and when.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kio.schema.errors import ErrorCode

from sparklog_testkit.processes import BrokerProcess
from tests.broker.rawclient import RawClient

from .helpers import (
    Member,
    RawMember,
    check_delivery,
    committed,
    create_topic,
    describe_json,
    produce,
    sparklog_cli,
    uncommitted,
    wait_balanced,
    wait_until,
)

COMMIT, FETCH_OFFSETS, DELETE_GROUPS = 8, 9, 42


def raw_commit(c: RawClient, group: str, topic: str, offset: int, generation: int,
               member_id: str, partition: int = 0) -> ErrorCode:  # fmt: skip
    """OffsetCommit v8 of one partition; its error code."""
    resp = c.request(COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "committed_metadata": "",
        }]}],
    })  # fmt: skip
    return ErrorCode(resp.topics[0].partitions[0].error_code)


def raw_fetch(c: RawClient, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """OffsetFetch v8 of some partitions: partition -> committed offset (-1: none)."""
    resp = c.request(FETCH_OFFSETS, 8, {
        "groups": [{"group_id": group,
                    "topics": [{"name": topic, "partition_indexes": partitions}]}],
        "require_stable": False,
    })  # fmt: skip
    (g,) = resp.groups
    assert g.error_code == ErrorCode.none, g
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def confluent_committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        assert all(tp.error is None for tp in tps), tps
        return [tp.offset for tp in tps]
    finally:
        c.close()


def starts(members: list[Member]) -> dict[int, int]:
    """Per partition, the lowest offset the members saw: where they started."""
    out: dict[int, int] = {}
    for m in members:
        for p, o, _v in m.records:
            out[p] = min(o, out.get(p, o))
    return out


# ---------------------------------------------------------------------------- resuming


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restarted_consumers_resume_from_committed_offsets(
    broker: BrokerProcess, spawn: Callable[..., Member], how: str
) -> None:
    """Stop (or SIGKILL, mid-record) every member of a group; new members resume exactly at
    the committed offsets: nothing skipped, nothing delivered twice but a killed member's
    one processed-but-uncommitted record."""
    group = topic = f"resume-{how}"
    create_topic(broker.bootstrap, topic, 3)
    produced = produce(broker.bootstrap, topic, 40, 3)
    first = [
        spawn(group, topic, f"{how}-a", client="confluent", delay=0.05),
        spawn(group, topic, f"{how}-b", client="kafka-python", delay=0.05),
    ]
    wait_balanced(first, 3)
    for m in first:
        m.wait_for(
            lambda m: len(m.records) >= 10 and m.snapshot()[-1]["ev"] == "rec",
            30,
            "10 records, the last not yet committed",
        )
        if how == "sigkill":
            m.kill()
        else:
            assert m.stop() == 0
    at_restart = committed(broker.bootstrap, group)
    for (_t, p), offset in at_restart.items():
        acked = [o for m in first for q, o in m.acked_commits if q == p]
        seen = [o for m in first for q, o, _v in m.records if q == p]
        # every acknowledged commit is there; at most the in-flight one beyond it
        assert max(acked, default=0) <= offset <= max(seen) + 1
    # every processed record is committed, but at most one per killed member
    processed = sum(len(m.records) for m in first)
    assert processed - len(first) * (how == "sigkill") <= sum(at_restart.values()) <= processed

    second = [
        spawn(group, topic, f"{how}-c", client="kafka-python"),
        spawn(group, topic, f"{how}-d", client="confluent"),
    ]
    everyone = first + second
    wait_until(lambda: produced <= {r for m in everyone for r in m.records}, 40,
               "the rest of the records")  # fmt: skip
    # the new members started at the committed offsets
    resume = {p: at_restart.get((topic, p), 0) for p in range(3)}  # 0: never committed
    assert starts(second) == {p: o for p, o in resume.items() if o < 40}, resume
    dups = check_delivery(everyone, produced)
    if how == "sigterm":
        assert dups == [], "a cleanly stopped member had committed everything it processed"
    else:
        # one in-flight record per killed member, delivered again unless its commit reached
        # the broker before the kill (the worker just never reported the answer)
        in_flight = {r for m in first for r in uncommitted(m)}
        assert len(in_flight) <= 2
        assert set(dups) == {r for r in in_flight if r[1] >= resume[r[0]]}, (dups, in_flight)
    for m in second:
        assert m.stop() == 0, m.diagnostics()
    assert committed(broker.bootstrap, group) == {(topic, p): 40 for p in range(3)}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_committed_offsets_survive_broker_restart(
    broker: BrokerProcess, spawn: Callable[..., Member], how: str
) -> None:
    """Commits are fsynced before they are acknowledged: after the broker is stopped (or
    SIGKILLed) and started again, confluent's committed() and ``groups describe`` show them,
    and a new member resumes from them. A member running across a second restart reconnects,
    rejoins (membership is not persisted) and finishes without skipping anything."""
    group = topic = f"durable-{how}"
    create_topic(broker.bootstrap, topic, 3)
    produced = produce(broker.bootstrap, topic, 30, 3)
    a = spawn(group, topic, "a", client="confluent", max_records=40)
    assert a.wait_exit(30) == 0, a.diagnostics()
    before = committed(broker.bootstrap, group)
    assert sum(before.values()) == 40
    assert before == {(topic, p): max(o for q, o in a.acked_commits if q == p)
                      for p in {q for q, _o in a.acked_commits}}  # fmt: skip
    expected = {p: before.get((topic, p)) for p in range(3)}  # None: nothing committed

    def bounce() -> None:
        if how == "sigkill":
            broker.kill()
        else:
            assert broker.stop() == 0
        broker.restart()

    bounce()
    assert confluent_committed(broker.bootstrap, group, topic, 3) == [
        -1001 if o is None else o for o in expected.values()
    ]
    doc = describe_json(broker.bootstrap, group)
    assert doc["state"] == "Empty" and doc["members"] == []
    rows = {(r["topic"], r["partition"]): r for r in doc["partitions"]}
    assert {k: r["committed_offset"] for k, r in rows.items()} == before
    assert {r["partition"]: r["lag"] for r in doc["partitions"]} == {
        p: 30 - o for (_t, p), o in before.items()
    }

    b = spawn(group, topic, "b", client="kafka-python", delay=0.05)
    b.wait_for(lambda m: len(m.records) >= 10, 30, "10 records")
    bounce()  # while b is consuming
    restarted = time.time()
    wait_until(lambda: produced <= {r for m in (a, b) for r in m.records}, 60,
               "b to finish after the restart")  # fmt: skip
    assert any(t > restarted for t in (e["t"] for e in b.of("rec"))), "b was done already"
    assert starts([b]) == {p: o or 0 for p, o in expected.items() if (o or 0) < 30}
    dups = check_delivery([a, b], produced)
    assert set(dups) <= set(uncommitted(b)), dups  # only commits lost to the restart
    assert b.stop() == 0, b.diagnostics()
    assert committed(broker.bootstrap, group) == {(topic, p): 30 for p in range(3)}


# ---------------------------------------------------------------------------- commit checks


def test_commit_checks_generation_member_and_state(broker: BrokerProcess) -> None:
    """ILLEGAL_GENERATION for a stale generation, UNKNOWN_MEMBER_ID for a stranger or a
    standalone commit while the group has members, REBALANCE_IN_PROGRESS while the group
    awaits its leader's SyncGroup; a standalone commit works once the group is empty. Only
    accepted commits change the committed offset."""
    group = topic = "checks"
    create_topic(broker.bootstrap, topic, 1)
    a = RawMember(broker.bootstrap, group, topic)
    b = RawMember(broker.bootstrap, group, topic)
    admin = RawClient.connect(broker.bootstrap)
    try:
        assert a.join().error_code == ErrorCode.none
        assert a.leader == a.member_id and a.members == [a.member_id]
        assert a.sync({a.member_id: [0]}).error_code == ErrorCode.none
        g1 = a.generation
        assert raw_commit(admin, group, topic, 1, g1, a.member_id) == ErrorCode.none

        # the same member joins again: a new generation, the old one is stale
        assert a.join().error_code == ErrorCode.none
        assert a.sync({a.member_id: [0]}).error_code == ErrorCode.none
        g2 = a.generation
        assert g2 == g1 + 1
        assert raw_commit(admin, group, topic, 99, g1, a.member_id) == ErrorCode.illegal_generation
        assert a.heartbeat(g1) == ErrorCode.illegal_generation
        assert raw_commit(admin, group, topic, 2, g2, a.member_id) == ErrorCode.none
        assert raw_commit(admin, group, topic, 98, g2, "stranger") == ErrorCode.unknown_member_id
        assert raw_commit(admin, group, topic, 97, -1, "") == ErrorCode.unknown_member_id
        assert raw_fetch(admin, group, topic, [0]) == {0: 2}

        # b joins: a learns of the rebalance from its heartbeat and rejoins
        b.ask_member_id()  # no rebalance yet: b is only pending
        assert a.heartbeat() == ErrorCode.none
        pending_b = b.send_join()
        assert wait_until(lambda: a.heartbeat() == ErrorCode.rebalance_in_progress, 5,
                          "a heartbeat answered REBALANCE_IN_PROGRESS")  # fmt: skip
        # a commit is still accepted while the group prepares its rebalance
        assert raw_commit(admin, group, topic, 3, g2, a.member_id) == ErrorCode.none
        pending_a = a.send_join()
        assert b.receive_join(pending_b).error_code == ErrorCode.none
        assert a.receive_join(pending_a).error_code == ErrorCode.none
        g3 = a.generation
        assert g3 == b.generation == g2 + 1 and a.leader == b.leader == a.member_id
        assert sorted(a.members) == sorted([a.member_id, b.member_id])
        # CompletingRebalance: nobody has synced yet
        assert raw_commit(admin, group, topic, 96, g3, b.member_id) == (
            ErrorCode.rebalance_in_progress
        )
        assert a.sync({a.member_id: [0], b.member_id: []}).error_code == ErrorCode.none
        assert b.sync().error_code == ErrorCode.none
        assert raw_commit(admin, group, topic, 4, g3, b.member_id) == ErrorCode.none
        assert raw_commit(admin, group, topic, 95, g2, b.member_id) == ErrorCode.illegal_generation
        assert raw_commit(admin, group, topic, 94, -1, "") == ErrorCode.unknown_member_id
        assert raw_fetch(admin, group, topic, [0]) == {0: 4}

        a.leave()
        b.leave()
        assert raw_commit(admin, group, topic, 5, g3, a.member_id) == ErrorCode.unknown_member_id
        assert raw_commit(admin, group, topic, 6, -1, "") == ErrorCode.none  # empty: standalone
        assert raw_fetch(admin, group, topic, [0]) == {0: 6}
    finally:
        for c in (a, b):
            c.close()
        admin.close()


def test_standalone_commit_with_a_real_client(
    broker: BrokerProcess, spawn: Callable[..., Member]
) -> None:
    """A confluent consumer that assign()s instead of subscribing commits with generation -1
    and no member id: refused while the group has a member, accepted once it is empty."""
    group = topic = "standalone"
    create_topic(broker.bootstrap, topic, 2)
    member = spawn(group, topic, "member")
    wait_balanced([member], 2)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        assert e.value.args[0].name() == "UNKNOWN_MEMBER_ID"
        assert member.stop() == 0
        (res,) = c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        assert res.error is None
    finally:
        c.close()
    assert committed(broker.bootstrap, group) == {(topic, 0): 7}


# ---------------------------------------------------------------------------- delivery models


@pytest.mark.slow
def test_two_groups_each_get_every_record_one_member_each(
    broker: BrokerProcess, spawn: Callable[..., Member]
) -> None:
    """Publish-subscribe between groups, point-to-point within one: each of two groups
    receives every record exactly once, and inside a group each record goes to one member
    (both members get some)."""
    topic = "fanout"
    create_topic(broker.bootstrap, topic, 4)
    groups = {
        g: [spawn(g, topic, f"{g}-{i}", client=c) for i, c in enumerate(("confluent", client))]
        for g, client in (("fan-a", "confluent"), ("fan-b", "kafka-python"))
    }
    for members in groups.values():
        wait_balanced(members, 4)
    produced = produce(broker.bootstrap, topic, 25, 4)
    for g, members in groups.items():
        wait_until(lambda ms=members: produced <= {r for m in ms for r in m.records}, 30,
                   f"{g} to receive every record")  # fmt: skip
        assert check_delivery(members, produced) == []
        x, y = ({r[:2] for r in m.records} for m in members)
        assert x and y and not x & y, "each record goes to one member of the group"
        for m in members:
            assert m.stop() == 0
    for g in groups:
        assert committed(broker.bootstrap, g) == {(topic, p): 25 for p in range(4)}


# ---------------------------------------------------------------------------- fetch and delete


def test_offset_fetch_without_commits(broker: BrokerProcess) -> None:
    """-1 for a group with no commits at all, and for the partitions a group never committed;
    confluent reports them as OFFSET_INVALID (-1001)."""
    create_topic(broker.bootstrap, "nocommits", 3)
    with RawClient.connect(broker.bootstrap) as c:
        assert raw_fetch(c, "never", "nocommits", [0, 1, 2]) == {0: -1, 1: -1, 2: -1}
        resp = c.request(FETCH_OFFSETS, 5, {
            "group_id": "never", "topics": [{"name": "nocommits", "partition_indexes": [0]}],
        })  # fmt: skip
        assert resp.error_code == ErrorCode.none
        assert [p.committed_offset for t in resp.topics for p in t.partitions] == [-1]
        assert raw_commit(c, "some", "nocommits", 4, -1, "", partition=1) == ErrorCode.none
        assert raw_fetch(c, "some", "nocommits", [0, 1, 2]) == {0: -1, 1: 4, 2: -1}
    assert confluent_committed(broker.bootstrap, "never", "nocommits", 3) == [-1001] * 3
    assert confluent_committed(broker.bootstrap, "some", "nocommits", 3) == [-1001, 4, -1001]


def test_delete_groups(broker: BrokerProcess) -> None:
    """DeleteGroups: NON_EMPTY_GROUP while a member is in the group, GROUP_ID_NOT_FOUND for an
    unknown group; deleting an empty group removes its offsets, and stays removed after a
    broker SIGKILL and restart (other groups' offsets stay)."""
    group = topic = "doomed"
    create_topic(broker.bootstrap, topic, 2)
    member = RawMember(broker.bootstrap, group, topic)
    admin = RawClient.connect(broker.bootstrap)

    def delete(g: str) -> ErrorCode:
        (r,) = admin.request(DELETE_GROUPS, 2, {"groups_names": [g]}).results
        return ErrorCode(r.error_code)

    try:
        for g, offset in ((group, 5), ("kept", 3)):
            assert raw_commit(admin, g, topic, offset, -1, "") == ErrorCode.none
            assert raw_commit(admin, g, topic, offset, -1, "", partition=1) == ErrorCode.none
        member.join()
        member.sync({member.member_id: [0, 1]})
        assert delete(group) == ErrorCode.non_empty_group
        assert raw_fetch(admin, group, topic, [0, 1]) == {0: 5, 1: 5}
        member.leave()
        assert delete(group) == ErrorCode.none
        assert raw_fetch(admin, group, topic, [0, 1]) == {0: -1, 1: -1}
        assert delete(group) == ErrorCode.group_id_not_found
        assert delete("no-such-group") == ErrorCode.group_id_not_found
    finally:
        member.close()
        admin.close()
    broker.kill()
    broker.restart()
    assert committed(broker.bootstrap, group) == {}
    assert committed(broker.bootstrap, "kept") == {(topic, 0): 3, (topic, 1): 3}
    r = sparklog_cli("groups", "list", "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["kept\tEmpty"]
