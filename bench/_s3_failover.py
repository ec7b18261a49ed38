"""Part 4 of ``bench/object_storage.py``: failover of a 3-broker cluster on S3 after a
leader is SIGKILLed and its cache directory deleted (the machine is gone).

Three brokers (``sparklog_testkit.processes.BrokerCluster``, each its own ``--cache-dir``,
``--flush-ms 25``) share only the bucket and one etcd (lease TTL ``ttl_ms``). A
``sparklog.demo.workload`` writes 500 records/s to 6 partitions throughout. Per fault: the
leader of partition ``i % 6`` is SIGKILLed and its cache deleted; failover = from the kill
to the first acknowledged write of each partition it led, the worst of them, taken as the
end of the longest gap between acks after the kill (an ack already on its way at the kill
does not count). The victim then restarts with an empty cache, and the next fault comes
``settle_s`` later (3 s by default, as in every run before 2026-11-28: the controller may
then still be moving partitions back to the restarted broker, whose take-overs share the
two cores with the next fault's; ``--settle-s 8`` lets them end first). Afterwards every
partition is read back and the history checked (``sparklog.demo.checker``: every anomaly
0). ``client``: producer settings over the workload's, e.g. ``retry.backoff.max.ms``.

Per fault the broker side is timed too: from the kill to the controller's reassignment of
the last of the victim's partitions (its "led by" log line: lease expiry plus a controller
round), and to the last of them installed by its successor (its "broker N leads
<topic>-<p> at epoch" line; wall clock, millisecond stamps). The rest of the failover is
the client's: its metadata refresh and its retry back-off (librdkafka's
``retry.backoff.max.ms``, 1 s by default) before it sends to the new leader.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from confluent_kafka.admin import AdminClient
from produce import create_topic

from sparklog.demo.checker import Report, check
from sparklog.demo.workload import Workload
from sparklog_testkit.processes import BrokerCluster, EtcdCluster

TOPIC, PARTITIONS = "failover", 6


def failover(
    new_dir: Callable[[str], str],
    uri: str,
    faults: int,
    ttl_ms: int,
    *,
    settle_s: float = 3.0,
    client: dict[str, Any] | None = None,
    tail_max_chunks: int | None = None,
) -> tuple[list[tuple[float, float]], Report, list[str]]:
    """((failover, broker side) seconds per fault, the history's check, the first producer
    errors). ``settle_s``: the pause after the victim's restart before the next fault;
    ``client``: producer settings over the workload's (librdkafka's defaults);
    ``tail_max_chunks``: the brokers' setting (their default, 256, if None)."""
    with EtcdCluster(new_dir("etcd")) as etcd:
        cluster = BrokerCluster(uri, etcd.endpoints, 3, lease_ttl_ms=ttl_ms)
        caches = {i: new_dir(f"cache{i}") for i in cluster.brokers}
        config: tuple[str, ...] = ()
        if tail_max_chunks is not None:
            path = os.path.join(new_dir("config"), "broker.toml")
            with open(path, "w") as f:
                f.write(f"[broker]\ntail_max_chunks = {tail_max_chunks}\n")
            config = ("--config", path)
        for i, b in cluster.brokers.items():
            b.extra = (*b.extra, "--cache-dir", caches[i], "--flush-ms", "25", *config)
        try:
            cluster.start()
            return _faults(cluster, caches, faults, settle_s, client or {})
        finally:
            cluster.stop()


def _faults(
    cluster: BrokerCluster,
    caches: dict[int, str],
    faults: int,
    settle_s: float,
    client: dict[str, Any],
) -> tuple[list[tuple[float, float]], Report, list[str]]:
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS, {})
    load = Workload(cluster.bootstrap, TOPIC, rate=500, client=client).start()
    times: list[tuple[float, float]] = []
    try:
        time.sleep(3)
        for i in range(faults):
            leaders = _leaders(cluster.bootstrap)
            victim = leaders[i % PARTITIONS]
            led = [p for p, n in leaders.items() if n == victim]
            t0, wall0 = time.monotonic(), time.time()
            cluster.brokers[victim].kill()
            shutil.rmtree(caches[victim])  # the machine is gone
            for p in led:  # acks in flight at the kill arrive within ms: wait past them
                while load.acked_since(t0 + 0.5, p) is None:
                    if time.monotonic() - t0 > 90:
                        raise TimeoutError(f"partition {p} took no write for 90 s")
                    time.sleep(0.05)
            time.sleep(0.5)
            assigned = max(_logged(cluster, _ASSIGNED, p, wall0) for p in led)
            broker_side = max(_logged(cluster, _LEADS, p, wall0) for p in led)
            times.append((max(_recovery(load, p, t0) for p in led), broker_side))
            print(f"  fault {i + 1}: broker {victim} (led {led}) killed, cache deleted: "
                  f"reassigned after {assigned:.2f} s, new leaders after {broker_side:.2f} s, "
                  f"writes again after {times[-1][0]:.2f} s", flush=True)  # fmt: skip
            os.makedirs(caches[victim])
            cluster.brokers[victim].start()
            time.sleep(settle_s)
    finally:
        history = load.stop(flush_s=30)
    load.read_all(timeout_s=300)
    return times, check(history), load.errors[:3]


def _leaders(bootstrap: str) -> dict[int, int]:
    """Partition -> leader, once every partition has one."""
    deadline = time.monotonic() + 60
    while True:
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
            found = {p.id: p.leader for p in md.topics[TOPIC].partitions.values()}
            if len(found) == PARTITIONS and all(n > 0 for n in found.values()):
                return found
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("partitions without a leader")
        time.sleep(0.2)


def _recovery(load: Any, p: int, t0: float) -> float:
    """From the kill to the ack that ends the longest gap between acks after it (s)."""
    times = sorted(t for t in load.ack_times.get(p, []) if t > t0 - 2)
    seq = [t for t in times if t <= t0][-1:] + [t for t in times if t > t0]
    gaps = [(b - a, b) for a, b in itertools.pairwise(seq)]
    return max(gaps)[1] - t0 if gaps else float("nan")


_LEADS = re.compile(r"^(\S+ \S+) INFO \S+: broker \d+ leads (\S+)-(\d+) at epoch")
_ASSIGNED = re.compile(r"^(\S+ \S+) INFO \S+: controller \d+: (\S+)-(\d+) led by")


def _logged(cluster: BrokerCluster, pattern: re.Pattern[str], p: int, wall0: float) -> float:
    """From the kill (wall clock ``wall0``) to the first line after it that ``pattern``
    matches for ``TOPIC-p``: the controller's reassignment, or the successor's install."""
    found = []
    for b in cluster.brokers.values():
        for line in list(b.lines):
            m = pattern.match(line)
            if m and m[2] == TOPIC and int(m[3]) == p:
                at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if at > wall0:
                    found.append(at - wall0)
    return min(found, default=float("nan"))
