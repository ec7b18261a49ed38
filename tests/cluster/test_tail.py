"""A cluster broker's tail commits in a real etcd (``sparklog.cluster.tail``): a claim at a
newer epoch fences every older one (its commits and drops are refused), a claim reads
exactly what was committed, a round over more partitions than one transaction allows
commits in several, and drops delete only sealed chunks."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.cluster.tail import EtcdTail
from sparklog.errors import LeaseLostError, NotLeaderError
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.tail.objects import TailEntry
from sparklog_testkit.processes import EtcdCluster


@pytest.fixture
def tails(etcd: EtcdCluster, tmp_path: Path) -> Iterator[tuple[EtcdTail, EtcdTail]]:
    fs = LocalFileSystem()
    a = EtcdTail(etcd.endpoints, "default", 1, fs, str(tmp_path))
    b = EtcdTail(etcd.endpoints, "default", 2, fs, str(tmp_path))
    yield a, b
    a.close()
    b.close()


def _entry(
    partition: int, epoch: int, next_offset: int, claim: str, obj: str = "wal/n1/x.wal"
) -> TailEntry:
    start = 16 + 100 * (next_offset - 10)
    return TailEntry("t", partition, epoch, "s.arrow", start, start + 1000, next_offset - 10,
                     next_offset, obj, 0, claim)  # fmt: skip


def test_a_newer_claim_fences_the_old_leaders_commits(tails: tuple[EtcdTail, EtcdTail]) -> None:
    old, new = tails
    claimed = old.claim("t", 0, 3)
    assert claimed.entries == []
    first = _entry(0, 3, 10, claimed.token)
    assert old.commit(1, [first]) == {}
    assert new.claim("t", 0, 4).entries == [first]  # exactly what was committed
    refused = old.commit(2, [_entry(0, 3, 20, claimed.token)])
    assert isinstance(refused[("t", 0)], NotLeaderError)
    assert not old.drop("t", 0, 3, claimed.token, 100)
    assert new.claim("t", 0, 4).entries == [first]  # nothing of the zombie landed


def test_a_second_claim_of_the_same_epoch_fences_the_first(
    tails: tuple[EtcdTail, EtcdTail],
) -> None:
    """A broker that lost its etcd lease and takes the same assignment over again: a round
    of its earlier tail still in flight must not land after the new claim read the tail."""
    leader, _ = tails
    earlier = leader.claim("t", 0, 5)
    later = leader.claim("t", 0, 5)
    refused = leader.commit(1, [_entry(0, 5, 10, earlier.token)])
    assert isinstance(refused[("t", 0)], NotLeaderError)
    assert leader.commit(2, [_entry(0, 5, 10, later.token)]) == {}


def test_an_older_claim_after_a_newer_one_is_refused(tails: tuple[EtcdTail, EtcdTail]) -> None:
    old, new = tails
    new.claim("t", 0, 5)
    with pytest.raises(LeaseLostError):
        old.claim("t", 0, 4)


def test_a_round_over_many_partitions_commits_in_several_transactions(
    tails: tuple[EtcdTail, EtcdTail],
) -> None:
    leader, _ = tails
    tokens = {p: leader.claim("t", p, 1).token for p in range(300)}
    before = leader.transactions
    assert leader.commit(1, [_entry(p, 1, 10, tokens[p]) for p in range(300)]) == {}
    assert leader.transactions - before >= 3
    assert all(leader.claim("t", p, 1).entries == [_entry(p, 1, 10, tokens[p])]
               for p in (0, 150, 299))  # fmt: skip


def test_a_drop_deletes_the_sealed_chunks_only(tails: tuple[EtcdTail, EtcdTail]) -> None:
    leader, _ = tails
    token = leader.claim("t", 0, 1).token
    chunks = [_entry(0, 1, n, token, f"wal/n1/{n}.wal") for n in (10, 20, 30)]
    leader.commit(1, chunks)
    assert leader.referenced_objects() >= {c.object for c in chunks}
    assert leader.drop("t", 0, 1, token, 20)
    assert leader.claim("t", 0, 1).entries == [chunks[2]]


def test_the_tails_of_deleted_topics_are_forgotten_and_a_live_ones_kept(
    tails: tuple[EtcdTail, EtcdTail], tmp_path: Path
) -> None:
    """The controller's sweep (``object_storage.forget_deleted_topics``): a tail key whose
    topic is gone, or was created again with another id, is deleted; a live topic's stays."""
    from sparklog.broker.object_storage import forget_deleted_topics
    from sparklog.storage import Storage
    from sparklog.storage.tail import BrokerTail, tail_key

    leader, _ = tails
    storage = Storage(str(tmp_path / "root"))
    live = storage.topics.create("live", 1)
    recreated = storage.topics.create("recreated", 1)
    keys = {
        "live": tail_key("live", live.topic_id),
        "gone": tail_key("gone", "0" * 32),
        "old": tail_key("recreated", "1" * 32),
        "new": tail_key("recreated", recreated.topic_id),
    }
    for key in keys.values():
        claimed = leader.claim(key, 0, 1)
        chunk = dataclasses.replace(_entry(0, 1, 10, claimed.token), topic=key)
        assert leader.commit(1, [chunk]) == {}
    broker = BrokerTail(leader, flush_ms=100, flush_bytes=1 << 20, timeout_ms=5000)
    try:
        assert set(keys.values()) <= leader.topic_keys()
        forgotten = forget_deleted_topics(broker, storage, leader.survey()[1])
        assert sorted(forgotten) == sorted([keys["gone"], keys["old"]])
        assert leader.claim(keys["gone"], 0, 2).entries == []
        assert len(leader.claim(keys["live"], 0, 2).entries) == 1
        assert len(leader.claim(keys["new"], 0, 2).entries) == 1
    finally:
        broker.rounds.close()
