"""``sparklog groups list|describe|delete|reset-offsets`` against a real broker, run as a
child process, checked against what was produced, consumed and committed.

Records carry explicit timestamps one second apart, the newest ~100 s old, so lag in
seconds (the age of the oldest unconsumed record) is known: ``now - ts[committed]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from confluent_kafka import Consumer, TopicPartition

from sparklog_testkit.processes import BrokerProcess

from .helpers import (
    Member,
    committed,
    create_topic,
    describe_json,
    produce,
    sparklog_cli,
    wait_balanced,
    wait_until,
)

TOPIC = "cli-topic"
GROUP = "cli-group"
N = 20  # records per partition
CONSUMED = {0: 8, 1: 5}  # records consumed and committed per partition


@pytest.fixture
def seeded(broker: BrokerProcess) -> Iterator[list[int]]:
    """TOPIC with N records in each of 2 partitions, record i stamped ts[i] (1 s apart, the
    last ~100 s ago); GROUP has consumed CONSUMED[p] records of partition p and committed
    them (a standalone consumer). Yields ts."""
    now_ms = int(time.time() * 1000)
    ts = [now_ms - 100_000 - (N - 1 - i) * 1000 for i in range(N)]
    create_topic(broker.bootstrap, TOPIC, 2)
    produce(broker.bootstrap, TOPIC, N, 2, timestamps=ts)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})  # fmt: skip
    try:
        for p, n in CONSUMED.items():
            c.assign([TopicPartition(TOPIC, p, 0)])
            got = []
            deadline = time.monotonic() + 20
            while len(got) < n and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got.append(m)
            assert [(m.offset(), m.timestamp()[1]) for m in got[:n]] == [
                (i, ts[i]) for i in range(n)
            ]
            (res,) = c.commit(offsets=[TopicPartition(TOPIC, p, n)], asynchronous=False)
            assert res.error is None
    finally:
        c.close()
    yield ts


def groups(broker: BrokerProcess, *args: str) -> tuple[int, str, str]:
    r = sparklog_cli("groups", *args, "--bootstrap-server", broker.bootstrap)
    return r.returncode, r.stdout, r.stderr


def listed(broker: BrokerProcess) -> dict[str, str]:
    rc, out, err = groups(broker, "list")
    assert rc == 0, err
    return dict(line.split("\t") for line in out.splitlines())


def confluent_committed(broker: BrokerProcess) -> list[int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    try:
        return [tp.offset for tp in c.committed(
            [TopicPartition(TOPIC, p) for p in (0, 1)], timeout=10)]  # fmt: skip
    finally:
        c.close()


def check_lag(broker: BrokerProcess, ts: list[int], doc_of: Callable[[], dict]) -> dict:  # type: ignore[type-arg]
    """Describe (through ``doc_of``) and check every partition row against CONSUMED and ts."""
    before = time.time()
    doc = doc_of()
    after = time.time()
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert sorted(rows) == [0, 1]
    for p, n in CONSUMED.items():
        r = rows[p]
        assert r["topic"] == TOPIC
        assert (r["committed_offset"], r["log_end_offset"], r["lag"]) == (n, N, N - n), r
        # the oldest unconsumed record is record n: its age, as the command saw it
        low, high = before - ts[n] / 1000, after - ts[n] / 1000
        assert low - 0.5 <= r["lag_seconds"] <= high + 0.5, (r, low, high)
        assert 100 + N - 1 - n - 1 < r["lag_seconds"]  # the seeded records' ages
    return doc


def test_list_and_describe_lag_with_and_without_members(
    broker: BrokerProcess, seeded: list[int], spawn: Callable[..., Member]
) -> None:
    ts = seeded
    assert listed(broker) == {GROUP: "Empty"}
    doc = check_lag(broker, ts, lambda: describe_json(broker.bootstrap, GROUP))
    assert doc["group"] == GROUP and doc["state"] == "Empty" and doc["members"] == []
    assert all(r["owner"] is None for r in doc["partitions"])

    # two members that consume but never commit: the committed offsets (and lag) stay put
    members = [spawn(GROUP, TOPIC, f"cli-m{i}", commit=False) for i in (0, 1)]
    wait_balanced(members, 2)
    rest = 2 * N - sum(CONSUMED.values())
    wait_until(lambda: len({r for m in members for r in m.records}) == rest, 20,
               "the members to read the rest")  # fmt: skip
    doc = check_lag(broker, ts, lambda: describe_json(broker.bootstrap, GROUP))
    assert doc["state"] == "Stable" and doc["protocol"] == "range"
    ids = {m["client_id"]: m["member_id"] for m in doc["members"]}
    assert sorted(ids) == ["cli-m0", "cli-m1"]
    assert all(m["host"] == "127.0.0.1" for m in doc["members"])
    owners = {r["partition"]: r["owner"] for r in doc["partitions"]}
    expect = {p: ids[m.name] for m in members for p in m.assignment}
    assert owners == expect and len(set(owners.values())) == 2, (owners, expect)
    assert listed(broker) == {GROUP: "Stable"}

    # the table form says the same
    before = time.time()
    rc, out, err = groups(broker, "describe", GROUP)
    after = time.time()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"group {GROUP} (Stable, 2 members)"
    assert lines[1].split("\t") == [
        "TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "LAG-SECONDS", "STATUS", "OWNER"
    ]  # fmt: skip
    table = {int(cols[1]): cols for cols in (line.split("\t") for line in lines[2:])}
    for p, n in CONSUMED.items():
        topic, _p, c, end, lag, secs, status, owner = table[p]
        assert (topic, c, end, lag, owner) == (TOPIC, str(n), str(N), str(N - n), expect[p])
        assert status == "-"  # this broker serves no /metrics: no lag status to show
        assert before - ts[n] / 1000 - 1 <= float(secs) <= after - ts[n] / 1000 + 1

    # no reset while the group has members
    rc, out, err = groups(broker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest")
    assert rc == 1 and "active members" in err, (rc, err)
    assert confluent_committed(broker) == [CONSUMED[0], CONSUMED[1]]
    rc, out, err = groups(broker, "delete", GROUP)
    assert rc == 1 and "NON_EMPTY_GROUP" in err, (rc, err)

    for m in members:
        assert m.stop() == 0
    doc = check_lag(broker, ts, lambda: describe_json(broker.bootstrap, GROUP))
    assert doc["state"] == "Empty" and doc["members"] == []
    assert listed(broker) == {GROUP: "Empty"}


def reset(broker: BrokerProcess, *how: str, mode: str = "--execute") -> tuple[int, str, str]:
    return groups(broker, "reset-offsets", GROUP, "--topic", TOPIC, *how, *([mode] if mode else []))


def iso(ms: int, tz: timezone = UTC) -> str:
    return datetime.fromtimestamp(ms / 1000, tz).isoformat()


def zulu(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_reset_offsets(broker: BrokerProcess, seeded: list[int]) -> None:
    ts = seeded
    cases = [
        (("--to-earliest",), [0, 0]),
        (("--to-latest",), [N, N]),
        (("--to-offset", "7"), [7, 7]),
        (("--to-datetime", iso(ts[10])), [10, 10]),  # the first record at or after it
        (("--to-datetime", iso(ts[10] - 500)), [10, 10]),
        (("--to-datetime", iso(ts[3], timezone(timedelta(hours=2)))), [3, 3]),
        (("--to-datetime", zulu(ts[12])), [12, 12]),
        (("--to-datetime", iso(ts[0] - 3_600_000)), [0, 0]),  # before every record
        (("--to-datetime", iso(ts[-1] + 3_600_000)), [N, N]),  # after every record: the end
    ]
    for how, want in cases:
        rc, out, err = reset(broker, *how)
        assert rc == 0, (how, err)
        assert out.splitlines() == [f"{GROUP}\t{TOPIC}\t{p}\t{o}" for p, o in enumerate(want)]
        assert confluent_committed(broker) == want, how
        assert committed(broker.bootstrap, GROUP) == {(TOPIC, p): o for p, o in enumerate(want)}
    doc = describe_json(broker.bootstrap, GROUP)
    assert [r["lag"] for r in doc["partitions"]] == [0, 0]
    assert [r["lag_seconds"] for r in doc["partitions"]] == [0.0, 0.0]


def test_reset_is_a_dry_run_unless_executed(broker: BrokerProcess, seeded: list[int]) -> None:
    """Kafka's semantics: without --execute the new offsets are printed, not committed
    (with a warning unless --dry-run says so)."""
    for mode, warned in (("", True), ("--dry-run", False)):
        rc, out, err = reset(broker, "--to-earliest", mode=mode)
        assert rc == 0, err
        assert out.splitlines() == [f"{GROUP}\t{TOPIC}\t{p}\t0" for p in (0, 1)]
        assert ("--execute option is missing" in err) == warned, err
        assert confluent_committed(broker) == [CONSUMED[0], CONSUMED[1]]  # unchanged
    rc, out, err = groups(broker, "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest",
                          "--dry-run", "--execute")  # fmt: skip
    assert rc == 2 and "not allowed with" in err, err


def test_reset_shift_by_moves_the_committed_offsets(
    broker: BrokerProcess, seeded: list[int]
) -> None:
    rc, _out, err = reset(broker, "--shift-by", "-3")
    assert rc == 0, err
    assert confluent_committed(broker) == [max(CONSUMED[0] - 3, 0), max(CONSUMED[1] - 3, 0)]
    rc, _out, err = reset(broker, "--shift-by", "1000")  # clamped at the log end
    assert rc == 0, err
    assert confluent_committed(broker) == [N, N]


def test_reset_shift_by_needs_a_committed_offset(broker: BrokerProcess, seeded: list[int]) -> None:
    rc, out, err = groups(broker, "reset-offsets", "fresh-group", "--topic", TOPIC,
                          "--shift-by", "2", "--execute")  # fmt: skip
    assert rc == 2 and "no committed offset" in err and out == "", err


def test_reset_to_offset_past_the_end_is_clamped(broker: BrokerProcess, seeded: list[int]) -> None:
    """As Kafka's kafka-consumer-groups does: an offset past the log end becomes the log end
    (a committed offset past the end is out of range: the consumer would fall back to
    auto.offset.reset, typically re-reading everything, and describe shows negative lag)."""
    rc, _out, err = reset(broker, "--to-offset", "1000")
    assert rc == 0, err
    assert confluent_committed(broker) == [N, N]
    assert [r["lag"] for r in describe_json(broker.bootstrap, GROUP)["partitions"]] == [0, 0]


def test_delete_group(broker: BrokerProcess, seeded: list[int]) -> None:
    rc, out, err = groups(broker, "delete", GROUP)
    assert rc == 0, err
    assert out.strip() == f"Deleted group {GROUP}."
    assert listed(broker) == {}
    assert committed(broker.bootstrap, GROUP) == {}
    assert confluent_committed(broker) == [-1001, -1001]
    rc, out, err = groups(broker, "delete", GROUP)
    assert rc == 1 and GROUP in err and "GROUP_ID_NOT_FOUND" in err, err


def test_errors(broker: BrokerProcess, seeded: list[int]) -> None:
    """One line on stderr, exit 2 for bad arguments and 1 for what the broker refuses."""
    for how, code, words in [
        (("--to-datetime", "yesterday"), 2, ["--to-datetime", "yesterday"]),
        (("--to-datetime", "2026-13-01T00:00:00Z"), 2, ["month"]),
        (("--to-datetime", "2026-01-01T00:00:00"), 2, ["time zone"]),
        (("--to-offset", "-1"), 2, ["negative"]),
    ]:
        rc, out, err = reset(broker, *how)
        assert rc == code and out == "", (how, rc, out)
        assert err.startswith("sparklog: error:") and len(err.strip().splitlines()) == 1, err
        assert all(w in err for w in words), (how, err)
    assert confluent_committed(broker) == [CONSUMED[0], CONSUMED[1]]  # nothing changed

    rc, out, err = groups(broker, "reset-offsets", GROUP, "--topic", "no-such-topic",
                          "--to-earliest")  # fmt: skip
    assert rc == 1 and "no-such-topic" in err, err
    rc, out, err = groups(broker, "reset-offsets", GROUP, "--topic", TOPIC)
    assert rc == 2 and "one of the arguments" in err, err

    # no broker at all
    r = sparklog_cli("groups", "list", "--bootstrap-server", "127.0.0.1:1")
    assert r.returncode == 1 and "cannot connect" in r.stderr


def test_unknown_group_is_an_error(broker: BrokerProcess, seeded: list[int]) -> None:
    """describe and delete of a group that does not exist fail with a message naming it, as
    they do for an unknown topic, instead of describing a "Dead" group with no partitions
    (a typo in the group name would otherwise look like a group with nothing to report)."""
    rc, out, err = groups(broker, "delete", "no-such-group")
    assert rc == 1 and "no-such-group" in err and out == "", (rc, out, err)
    for json_flag in ((), ("--json",)):
        rc, out, err = groups(broker, "describe", "no-such-group", *json_flag)
        assert rc == 1 and "no-such-group" in err and out == "", (rc, out, err)
    assert listed(broker) == {GROUP: "Empty"}  # nothing was created on the way


def test_describe_json_is_machine_readable(broker: BrokerProcess, seeded: list[int]) -> None:
    rc, out, err = groups(broker, "describe", GROUP, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc) == {"group", "state", "protocol", "members", "partitions", "status"}
    assert {frozenset(r) for r in doc["partitions"]} == {
        frozenset({"topic", "partition", "owner", "committed_offset", "log_end_offset", "lag",
                   "lag_seconds", "status"})
    }  # fmt: skip
    assert doc["status"] is None  # no /metrics on this broker (tests/broker/test_metrics.py)
