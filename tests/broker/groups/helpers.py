"""Group members in child processes, and what the group tests check about them.

``Member`` runs ``tests/broker/groups/worker.py`` (one real consumer, confluent-kafka or
kafka-python) and collects its JSON events; the parent can SIGKILL it at any moment and still
know every record it processed and every commit the broker acknowledged. From those events:

- ``ownership``: who owned which partition when (assign/revoke callbacks, ended by a kill);
  the callbacks are causally ordered (a revoke runs before its member rejoins, an assign
  after the SyncGroup that needed that rejoin), so owners must never overlap in time.
- ``check_delivery``: across members, every produced record was processed (nothing
  skipped), and no record was processed again after a commit past it had been
  acknowledged (by anyone): only an unacknowledged commit may let a record come again.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from sparklog.kafka import admin as kc
from sparklog.kafka.client import KafkaClient
from tests.broker.rawclient import RawClient

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SESSION_MS = 6000
HEARTBEAT_MS = 1000


def wait_until(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``cond`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Member:
    """One group member in a child process; see the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        *,
        client: str = "confluent",
        strategy: str | None = None,
        delay: float = 0.0,
        commit: bool = True,
        max_records: int | None = None,
        session_ms: int = SESSION_MS,
        heartbeat_ms: int = HEARTBEAT_MS,
    ) -> None:
        self.name = name
        self.client = client
        cmd = [
            sys.executable, "-m", "tests.broker.groups.worker", "--client", client,
            "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--name", name,
            "--delay", str(delay), "--session-ms", str(session_ms),
            "--heartbeat-ms", str(heartbeat_ms),
        ]  # fmt: skip
        if strategy:
            cmd += ["--strategy", strategy]
        if not commit:
            cmd.append("--no-commit")
        if max_records is not None:
            cmd += ["--max-records", str(max_records)]
        self.events: list[dict[str, Any]] = []
        self.stderr: collections.deque[str] = collections.deque(maxlen=50)
        self.killed_at: float | None = None
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT
        )
        self._threads = [
            threading.Thread(target=self._read_events, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:  # a line cut short by SIGKILL
                continue
            with self._cond:
                self.events.append(event)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def __repr__(self) -> str:
        return f"Member({self.name}, {self.client})"

    # ------------------------------------------------------------------ what it did

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self.events)

    def of(self, ev: str) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] == ev]

    @property
    def assignment(self) -> set[int]:
        """The partitions it owns now (as far as its callbacks have been reported)."""
        owned: set[int] = set()
        for e in self.snapshot():
            if e["ev"] == "assign":
                owned |= set(e["parts"])
            elif e["ev"] == "revoke":
                owned -= set(e["parts"])
        return set() if self.killed_at is not None or self.exited else owned

    @property
    def records(self) -> list[tuple[int, int, str]]:
        return [(e["p"], e["o"], e["v"]) for e in self.of("rec")]

    @property
    def acked_commits(self) -> set[tuple[int, int]]:
        """(partition, committed offset) of every commit the broker acknowledged."""
        return {(e["p"], e["o"]) for e in self.of("commit") if e["ok"]}

    def failed_commits(self) -> list[dict[str, Any]]:
        return [e for e in self.of("commit") if not e["ok"]]

    def ownership(self) -> list[tuple[int, float, float]]:
        """(partition, from, to) intervals of ownership; an open one ends at the kill (or at
        the last event if the member is still alive or exited cleanly)."""
        events = self.snapshot()
        start: dict[int, float] = {}
        out = []
        for e in events:
            if e["ev"] == "assign":
                for p in e["parts"]:
                    start.setdefault(p, e["t"])
            elif e["ev"] == "revoke":
                for p in e["parts"]:
                    if p in start:
                        out.append((p, start.pop(p), e["t"]))
        end = self.killed_at if self.killed_at is not None else float("inf")
        if self.killed_at is None and self.of("closed"):
            end = self.of("closed")[-1]["t"]
        out.extend((p, t, end) for p, t in start.items())
        return out

    @property
    def exited(self) -> bool:
        return self.proc.poll() is not None

    def diagnostics(self) -> str:
        tail = "\n".join(self.stderr)
        return f"{self!r}: rc={self.proc.poll()} last events={self.snapshot()[-5:]}\n{tail}"

    # ------------------------------------------------------------------ control

    def wait_for(self, cond: Callable[[Member], Any], timeout: float, what: str) -> Any:
        try:
            return wait_until(lambda: cond(self), timeout, f"{self.name}: {what}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.diagnostics()}") from None

    def kill(self) -> None:
        """SIGKILL: it gets no chance to commit, leave the group or close anything."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.killed_at = time.time()
        for t in self._threads:
            t.join(5)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM: it finishes the record in hand, closes the consumer (leaving the group)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop\n{self.diagnostics()}") from None
        for t in self._threads:
            t.join(5)
        return rc

    def wait_exit(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit\n{self.diagnostics()}") from None
        for t in self._threads:
            t.join(5)
        return rc

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------- checks


def live_assignment(members: Iterable[Member]) -> dict[str, set[int]]:
    return {m.name: m.assignment for m in members if m.killed_at is None and not m.exited}


def wait_balanced(
    members: Sequence[Member], partitions: int, timeout: float = 30.0
) -> dict[str, set[int]]:
    """Wait until the live members' assignments are disjoint and together cover every
    partition, every live member owning some; return them."""
    want = set(range(partitions))

    def ok() -> dict[str, set[int]] | None:
        a = live_assignment(members)
        owned = [p for parts in a.values() for p in parts]
        if sorted(owned) == sorted(want) and all(a.values()):
            return a
        return None

    try:
        return wait_until(ok, timeout, f"a complete, disjoint assignment of {partitions}")
    except AssertionError as e:
        diag = "\n".join(m.diagnostics() for m in members)
        raise AssertionError(f"{e}: {live_assignment(members)}\n{diag}") from None


def check_no_overlap(members: Sequence[Member]) -> None:
    """No partition was ever owned by two members at the same time."""
    by_part: dict[int, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for m in members:
        for p, start, end in m.ownership():
            by_part[p].append((start, end, m.name))
    for p, spans in by_part.items():
        spans.sort()
        for (_s1, e1, n1), (s2, _e2, n2) in itertools.pairwise(spans):
            assert e1 <= s2, f"partition {p}: owned by {n1} until {e1} and by {n2} from {s2}"


def check_delivery(
    members: Sequence[Member], produced: set[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    """Nothing skipped, nothing unexpected, and every duplicate explained; returns the
    duplicates (see the module docstring)."""
    seen: dict[tuple[int, int, str], list[tuple[float, Member]]] = collections.defaultdict(list)
    for m in members:
        for e in m.of("rec"):
            seen[(e["p"], e["o"], e["v"])].append((e["t"], m))
    missing = produced - set(seen)
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:5]}"
    extra = set(seen) - produced
    assert not extra, f"records never produced were delivered: {sorted(extra)[:5]}"
    dups = sorted(r for r, times in seen.items() if len(times) > 1)
    acks = [(e["t"], e["p"], e["o"]) for m in members for e in m.of("commit") if e["ok"]]
    for r in dups:
        p, o, _v = r
        for t, m in sorted(seen[r], key=lambda tm: tm[0])[1:]:
            past = [(tc, x) for tc, q, x in acks if q == p and x > o and tc < t]
            assert not past, f"{r} delivered again to {m.name} after a commit past it: {past}"
    return dups


def uncommitted(member: Member) -> list[tuple[int, int, str]]:
    """Records the member processed whose own commit was not acknowledged: it failed, or the
    member died before the answer came."""
    out = []
    pending: tuple[int, int, str] | None = None
    for e in member.snapshot():
        if e["ev"] == "rec":
            if pending is not None:  # no commit at all (--no-commit)
                out.append(pending)
            pending = (e["p"], e["o"], e["v"])
        elif e["ev"] == "commit":
            if not e["ok"] and pending is not None:
                out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


# ---------------------------------------------------------------------------- broker side


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    t = topic.encode()
    return struct.pack(">hih", 0, 1, len(t)) + t + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data (null)."""
    t = topic.encode()
    body = struct.pack(">hih", 0, 1, len(t)) + t + struct.pack(">i", len(partitions))
    return body + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1)


JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13


class RawMember:
    """A group member speaking the classic protocol by hand over its own connection, so a
    test decides exactly what is sent and when (``send_join``/``receive_join`` split a
    JoinGroup that waits for a rebalance). It subscribes to ``topic`` (the "range"
    protocol's metadata) unless a join is given other ``metadata``."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, *,
        session_ms: int = 10_000, rebalance_ms: int = 10_000,
    ) -> None:  # fmt: skip
        self.c = RawClient.connect(bootstrap, timeout=30 + rebalance_ms / 1000)
        self.group, self.topic = group, topic
        self.session_ms, self.rebalance_ms = session_ms, rebalance_ms
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list[str] = []

    def close(self) -> None:
        self.c.close()

    def _join_body(self, metadata: bytes | None) -> dict[str, Any]:
        return {
            "group_id": self.group, "session_timeout": self.session_ms,
            "rebalance_timeout": self.rebalance_ms, "member_id": self.member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range",
                           "metadata": subscription(self.topic) if metadata is None else metadata}],
        }  # fmt: skip

    def send_join(self, metadata: bytes | None = None) -> int:
        return self.c.send(JOIN, 5, self._join_body(metadata))

    def receive_join(self, correlation: int) -> Any:
        resp = self.c.receive(JOIN, 5, correlation)
        if resp.error_code == ErrorCode.none:
            self.member_id, self.generation = resp.member_id, int(resp.generation_id)
            self.leader = resp.leader
            self.members = [m.member_id for m in resp.members]
        return resp

    def ask_member_id(self) -> None:
        """JoinGroup v5 without an id is answered MEMBER_ID_REQUIRED, with the id to use."""
        resp = self.c.request(JOIN, 5, {**self._join_body(None), "member_id": ""})
        assert resp.error_code == ErrorCode.member_id_required and resp.member_id, resp
        self.member_id = resp.member_id

    def join(self, metadata: bytes | None = None) -> Any:
        if not self.member_id:
            self.ask_member_id()
        return self.receive_join(self.send_join(metadata))

    def send_sync(self, assignments: dict[str, list[int]] | None = None) -> int:
        return self.c.send(SYNC, 3, {
            "group_id": self.group, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None,
            "assignments": [{"member_id": m, "assignment": assignment(self.topic, parts)}
                            for m, parts in (assignments or {}).items()],
        })  # fmt: skip

    def receive_sync(self, correlation: int) -> Any:
        return self.c.receive(SYNC, 3, correlation)

    def sync(self, assignments: dict[str, list[int]] | None = None) -> Any:
        return self.receive_sync(self.send_sync(assignments))

    def heartbeat(self, generation: int | None = None) -> ErrorCode:
        gen = self.generation if generation is None else generation
        return ErrorCode(self.c.request(HEARTBEAT, 3, {
            "group_id": self.group, "generation_id": gen, "member_id": self.member_id,
            "group_instance_id": None,
        }).error_code)  # fmt: skip

    def leave(self) -> None:
        resp = self.c.request(LEAVE, 3, {
            "group_id": self.group,
            "members": [{"member_id": self.member_id, "group_instance_id": None}],
        })  # fmt: skip
        assert resp.error_code == ErrorCode.none and resp.members[0].error_code == 0, resp


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with KafkaClient(bootstrap) as c:
        kc.create_topic(c, name, partitions, {})


def produce(
    bootstrap: str,
    topic: str,
    per_partition: int,
    partitions: int,
    *,
    tag: str = "",
    timestamps: Sequence[int] | None = None,
) -> set[tuple[int, int, str]]:
    """``per_partition`` records to each partition (values ``"<tag>p<P>-<i>"``), acks=all;
    returns (partition, offset, value) of each. ``timestamps[i]`` is record i's timestamp."""
    delivered: list[tuple[int, int, str]] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value().decode()))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(per_partition):
        for part in range(partitions):
            kwargs: dict[str, Any] = {}
            if timestamps is not None:
                kwargs["timestamp"] = timestamps[i]
            p.produce(topic, value=f"{tag}p{part}-{i}".encode(), partition=part,
                      on_delivery=report, **kwargs)  # fmt: skip
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    assert len(delivered) == per_partition * partitions
    return set(delivered)


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets through OffsetFetch (sparklog's own client)."""
    with KafkaClient(bootstrap) as c:
        return kc.committed_offsets(c, group)


def sparklog_cli(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``sparklog ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "sparklog.cli", *args],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=timeout,
    )  # fmt: skip


def describe_json(bootstrap: str, group: str) -> dict[str, Any]:
    r = sparklog_cli("groups", "describe", group, "--json", "--bootstrap-server", bootstrap)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def check_owners(bootstrap: str, group: str, assignment: dict[str, set[int]]) -> None:
    """``groups describe`` names, for each partition, the member the members' own callbacks
    say owns it (``assignment``: client id -> partitions)."""
    doc = describe_json(bootstrap, group)
    ids = {m["client_id"]: m["member_id"] for m in doc["members"]}
    assert sorted(ids) == sorted(assignment), (doc["members"], assignment)
    owners = {r["partition"]: r["owner"] for r in doc["partitions"] if r["owner"]}
    assert owners == {p: ids[name] for name, parts in assignment.items() for p in parts}, doc
