"""A broker of a cluster on object storage (three brokers sharing only SeaweedFS and etcd)
dies in the middle of a tail round, at the crash points of ``storage/tail/rounds.py``:

- ``tail.after_upload``: the round's object is in the bucket, its etcd transaction not
  sent. Nothing of it was committed, so nothing of it was acknowledged; its records are
  still in the dead broker's cache, and a leader that takes over must not see them.
- ``tail.after_commit``: the round is committed in etcd, its producers not yet answered.
  They send the records again to the next leader, which must recognise them from the
  idempotent-producer state it rebuilt from the committed tail (no duplicate).
- ``seal.after_write``: a segment rolled (the roll kept, not committed: on object storage
  the seal's manifest version carries it, ``storage/rolls.py``) and its Parquet file is in
  the bucket, the manifest not committed. The next leader finds the segments past the
  manifest's active one in the tail, commits their rolls and seals them itself. The topic
  rolls every 16 KiB so that this happens within a few seconds.

``SPARKLOG_CRASH_AT`` is armed in one broker's first start only; it dies (exit code 77, no
cleanup, as a SIGKILL would leave it) at its first round, while an idempotent acks=all
workload writes to every partition. The machine then comes back with its cache directory
as it was, or without it (the disk was lost too); the workload goes on through the
take-over and the restart, and ``checker.check`` proves every acknowledged record was read
exactly once at the offset it was acknowledged with."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from sparklog.demo.checker import check
from sparklog.demo.workload import Workload
from sparklog.storage.crashpoints import CRASH_EXIT_CODE
from sparklog_testkit.processes import EtcdCluster

from ..support.s3 import SeaweedS3
from .helpers import broker_logs, cache_dir, leaders, s3_cluster_with_topic

TOPIC = "crashed"
PARTITIONS = 4
VICTIM = 3


@pytest.mark.parametrize("cache", ["cache kept", "cache lost"])
@pytest.mark.parametrize("point", ["tail.after_upload", "tail.after_commit", "seal.after_write"])
def test_a_broker_killed_between_the_steps_of_a_tail_round_loses_nothing(
    point: str, cache: str, etcd: EtcdCluster, s3_server: SeaweedS3, tmp_path: Path
) -> None:
    armed = {VICTIM: {"SPARKLOG_CRASH_AT": point}}
    configs = {"segment.bytes": "16384"} if point.startswith("seal.") else None
    with s3_cluster_with_topic(
        etcd, s3_server, tmp_path, TOPIC, PARTITIONS, configs=configs, env=armed
    ) as c:
        led = [p for p, n in leaders(c.bootstrap, TOPIC, PARTITIONS).items() if n == VICTIM]
        assert led, f"broker {VICTIM} leads no partition of {TOPIC}: nothing would crash it"
        victim = c.brokers[VICTIM]
        work = Workload(c.bootstrap, TOPIC, rate=400).start()
        try:
            deadline = time.monotonic() + 60
            while victim.alive:
                assert time.monotonic() < deadline, f"broker {VICTIM} never reached {point}"
                time.sleep(0.05)
            assert victim.proc is not None and victim.proc.returncode == CRASH_EXIT_CODE
            if cache == "cache lost":
                shutil.rmtree(cache_dir(c, VICTIM))
            t0 = time.monotonic()
            leaders(c.bootstrap, TOPIC, PARTITIONS, avoid=VICTIM)
            for p in led:  # the survivors took its partitions over and write them
                while work.acked_since(t0, p) is None:
                    assert time.monotonic() - t0 < 60, f"partition {p} never took a write again"
                    time.sleep(0.1)
            victim.start()  # the machine is back, the crash point disarmed
            t1 = time.monotonic()
            while work.acked_since(t1, led[0]) is None:
                assert time.monotonic() - t1 < 60, f"partition {led[0]} stopped taking writes"
                time.sleep(0.1)
            time.sleep(2)
            history = work.stop()
            assert len(history.acked) > 1000, (len(history.acked), work.errors[:3])
            work.read_all()
            report = check(history)
            assert report.valid, report.summary()
        finally:
            work.stop()
            broker_logs(c, tmp_path / "brokers.log")
