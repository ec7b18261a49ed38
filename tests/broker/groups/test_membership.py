"""Who is a member of a group, and when a JoinGroup rebalances: the coordinator's rules for
a known member's JoinGroup, and session expiry at each member's own deadline.

Every member speaks the classic protocol by hand (``helpers.RawMember``, one blocking
connection each), so a test decides exactly what is sent and when. These very test
functions were run once against Apache Kafka 4.3.1 (``bench/_kafka.py``: one KRaft node,
``group.initial.rebalance.delay.ms`` 0, ``group.min.session.timeout.ms`` 1000 so that the
same session timeouts are allowed), with a FindCoordinator first so that its
``__consumer_offsets`` was loaded; all passed there. Each docstring says what Kafka answered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from kio.schema.errors import ErrorCode

from sparklog_testkit.processes import BrokerProcess
from tests.broker.rawclient import RawClient

from .helpers import RawMember, assignment, create_topic, subscription, wait_until

DELETE_GROUPS = 42
REBALANCE_MS = 20_000  # a rebalance that waits for someone takes this long: easy to tell


@contextmanager
def stable_pair(bootstrap: str, group: str, topic: str) -> Iterator[tuple[RawMember, RawMember]]:
    """(leader, follower) of a Stable two-member group, both synced: the leader joins alone,
    the follower's join rebalances, the leader learns of it from its heartbeat and rejoins
    (the same sequence works whatever the broker's initial rebalance delay)."""
    leader = RawMember(bootstrap, group, topic, rebalance_ms=REBALANCE_MS)
    follower = RawMember(bootstrap, group, topic, rebalance_ms=REBALANCE_MS)
    try:
        assert leader.join().error_code == ErrorCode.none
        assert leader.sync({leader.member_id: [0, 1]}).error_code == ErrorCode.none
        follower.ask_member_id()
        pending = follower.send_join()
        wait_until(lambda: leader.heartbeat() == ErrorCode.rebalance_in_progress, 10,
                   "the leader's heartbeat answered REBALANCE_IN_PROGRESS")  # fmt: skip
        assert leader.join().error_code == ErrorCode.none
        assert follower.receive_join(pending).error_code == ErrorCode.none
        assert follower.leader == leader.member_id == leader.leader
        synced = follower.send_sync()
        parts = {leader.member_id: [0], follower.member_id: [1]}
        assert leader.sync(parts).error_code == ErrorCode.none
        assert follower.receive_sync(synced).error_code == ErrorCode.none
        yield leader, follower
    finally:
        leader.close()
        follower.close()


def test_follower_rejoin_with_same_metadata_is_answered_at_once(broker: BrokerProcess) -> None:
    """A follower of a Stable group that sends JoinGroup again with unchanged metadata (a
    client whose JoinGroup answer was lost) is answered at once with the current
    generation, protocol and leader and no member list; nothing rebalances, so the
    leader's heartbeat still succeeds and the follower's SyncGroup returns its assignment.
    Apache Kafka 4.3.1 answered the same rejoin in 10 ms: error NONE, the same generation,
    protocol "range", the same leader, no members; both heartbeats then NONE."""
    group = topic = "rejoin-follower"
    create_topic(broker.bootstrap, topic, 2)
    with stable_pair(broker.bootstrap, group, topic) as (leader, follower):
        generation = follower.generation
        started = time.monotonic()
        resp = follower.join()
        took = time.monotonic() - started
        assert resp.error_code == ErrorCode.none, resp
        assert took < REBALANCE_MS / 1000 / 4, f"the rejoin waited {took:.1f} s for a rebalance"
        assert (resp.generation_id, resp.protocol_name, resp.leader) == (
            generation, "range", leader.member_id,
        )  # fmt: skip
        assert resp.member_id == follower.member_id and list(resp.members) == []
        assert leader.heartbeat() == ErrorCode.none
        assert follower.heartbeat() == ErrorCode.none
        synced = follower.sync()
        assert synced.error_code == ErrorCode.none, synced
        assert bytes(synced.assignment) == assignment(topic, [1])


def test_leader_rejoin_rebalances(broker: BrokerProcess) -> None:
    """The leader's JoinGroup in a Stable group starts a rebalance even with unchanged
    metadata (a leader rejoins to reassign after topic metadata changes): the follower's
    heartbeat gets REBALANCE_IN_PROGRESS and both land in the next generation, the leader
    with the member list. Apache Kafka 4.3.1: the same (follower heartbeat
    REBALANCE_IN_PROGRESS, then generation + 1 for both)."""
    group = topic = "rejoin-leader"
    create_topic(broker.bootstrap, topic, 2)
    with stable_pair(broker.bootstrap, group, topic) as (leader, follower):
        generation = leader.generation
        pending = leader.send_join()
        wait_until(lambda: follower.heartbeat() == ErrorCode.rebalance_in_progress, 10,
                   "the follower's heartbeat answered REBALANCE_IN_PROGRESS")  # fmt: skip
        assert follower.join().error_code == ErrorCode.none
        assert leader.receive_join(pending).error_code == ErrorCode.none
        assert leader.generation == follower.generation == generation + 1
        assert sorted(leader.members) == sorted([leader.member_id, follower.member_id])


def test_follower_rejoin_with_changed_metadata_rebalances(broker: BrokerProcess) -> None:
    """A follower whose JoinGroup carries other metadata (a changed subscription) starts a
    rebalance: the leader's heartbeat gets REBALANCE_IN_PROGRESS, and once the leader
    rejoins both are in the next generation, the leader seeing the new subscription.
    Apache Kafka 4.3.1: the same."""
    group = topic = "rejoin-changed"
    create_topic(broker.bootstrap, topic, 2)
    create_topic(broker.bootstrap, "rejoin-changed-2", 1)
    with stable_pair(broker.bootstrap, group, topic) as (leader, follower):
        generation = follower.generation
        changed = subscription("rejoin-changed-2")
        pending = follower.send_join(changed)
        wait_until(lambda: leader.heartbeat() == ErrorCode.rebalance_in_progress, 10,
                   "the leader's heartbeat answered REBALANCE_IN_PROGRESS")  # fmt: skip
        resp = leader.join()
        assert resp.error_code == ErrorCode.none
        assert follower.receive_join(pending).error_code == ErrorCode.none
        assert leader.generation == follower.generation == generation + 1
        metadata = {m.member_id: bytes(m.metadata) for m in resp.members}
        assert metadata[follower.member_id] == changed


def test_rejoin_while_completing_rebalance_gets_the_current_answer(
    broker: BrokerProcess,
) -> None:
    """In CompletingRebalance (joined, the leader has not synced yet), a member that sends
    JoinGroup again with unchanged metadata gets the current generation's answer again,
    the leader with the member list, and nothing rebalances: the leader's SyncGroup then
    completes the generation. Apache Kafka 4.3.1: the same (both rejoins NONE at once, same
    generation, the leader's with both members; SyncGroup NONE)."""
    group = topic = "rejoin-completing"
    create_topic(broker.bootstrap, topic, 2)
    with stable_pair(broker.bootstrap, group, topic) as (leader, follower):
        generation = leader.generation
        pending = leader.send_join()  # the leader rebalances the group ...
        wait_until(lambda: follower.heartbeat() == ErrorCode.rebalance_in_progress, 10,
                   "the follower's heartbeat answered REBALANCE_IN_PROGRESS")  # fmt: skip
        assert follower.join().error_code == ErrorCode.none
        assert leader.receive_join(pending).error_code == ErrorCode.none  # ... and is answered
        assert follower.generation == generation + 1  # nobody has synced: CompletingRebalance
        for m, members in ((follower, []), (leader, [leader.member_id, follower.member_id])):
            started = time.monotonic()
            resp = m.join()
            took = time.monotonic() - started
            assert resp.error_code == ErrorCode.none, resp
            assert took < REBALANCE_MS / 1000 / 4, f"the rejoin waited {took:.1f} s"
            assert (resp.generation_id, resp.leader) == (generation + 1, leader.member_id)
            assert sorted(x.member_id for x in resp.members) == sorted(members)
        synced = follower.send_sync()
        parts = {leader.member_id: [0], follower.member_id: [1]}
        assert leader.sync(parts).error_code == ErrorCode.none
        assert follower.receive_sync(synced).error_code == ErrorCode.none
        assert leader.heartbeat() == follower.heartbeat() == ErrorCode.none


def test_session_expires_at_its_deadline(broker: BrokerProcess) -> None:
    """A member that stops heartbeating is removed when its session timeout has passed
    since its last heartbeat, not some time later: a DeleteGroups sent 30 ms after the
    deadline (measured from the answer of the last heartbeat, so the broker's deadline is
    no later) succeeds, while one halfway through the session is NON_EMPTY_GROUP. Three
    groups in a row, so that expiry by a periodic sweep would be caught. Apache Kafka
    4.3.1: NON_EMPTY_GROUP halfway, DeleteGroups NONE 30 ms after the deadline, in
    each of three rounds (session 1500 ms, as here)."""
    session_ms = 1500
    create_topic(broker.bootstrap, "expiry", 2)
    with RawClient.connect(broker.bootstrap) as admin:

        def delete(g: str) -> ErrorCode:
            (r,) = admin.request(DELETE_GROUPS, 2, {"groups_names": [g]}).results
            return ErrorCode(r.error_code)

        for i in range(3):
            group = f"expiry-{i}"
            m = RawMember(broker.bootstrap, group, "expiry", session_ms=session_ms)
            try:
                assert m.join().error_code == ErrorCode.none
                assert m.sync({m.member_id: [0, 1]}).error_code == ErrorCode.none
                sent = time.monotonic()
                assert m.heartbeat() == ErrorCode.none
                answered = time.monotonic()
                time.sleep(max(sent + session_ms / 2000 - time.monotonic(), 0))
                assert delete(group) == ErrorCode.non_empty_group
                time.sleep(max(answered + session_ms / 1000 + 0.03 - time.monotonic(), 0))
                assert delete(group) == ErrorCode.none, f"round {i}: the session outlived it"
            finally:
                m.close()
