"""Broker durability chaos at a larger size than the test suite runs it.

The scenario and the checks are those of tests/broker/test_chaos.py (shared through
sparklog_testkit/chaos.py): idempotent acks=all confluent-kafka producers write to a
multi-partition topic while the broker process is SIGKILLed and restarted at random
moments; afterwards storage must hold every acknowledged record exactly once, at its
acknowledged offset, in each producer's send order, with dense offsets.

    .venv/bin/python bench/chaos.py                      # 60 kills in 180 s, 4 x 8, 1000/s
    .venv/bin/python bench/chaos.py --kills 200 --seconds 600 --rate 2000
    SPARKLOG_CHAOS_SEED=1234 .venv/bin/python bench/chaos.py   # repeat a run's kill times

Every option can also be given as SPARKLOG_CHAOS_<NAME> (the option wins). Exit status: 0
when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sparklog_testkit.chaos import (
    ChaosConfig,
    check_acknowledged_exactly_once,
    check_nothing_unsent,
    check_offsets,
    check_send_order,
    run_chaos,
    summary,
)

BENCH_SIZE = {"kills": 60, "seconds": 180.0, "producers": 4, "partitions": 8, "rate": 1000.0}
CHECKS = {
    "acknowledged records stored once at their offsets": check_acknowledged_exactly_once,
    "send order per producer and partition": check_send_order,
    "dense offsets, none reused": check_offsets,
    "nothing stored that was never sent": check_nothing_unsent,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--producers", type=int)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--rate", type=float, help="records per second per producer")
    parser.add_argument("--segment-bytes", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--data-dir", help="keep the broker's data here (default: a temp dir)")
    args = parser.parse_args(argv)

    options = {k: v for k, v in vars(args).items() if k != "data_dir" and v is not None}
    config = dataclasses.replace(ChaosConfig.from_env(**BENCH_SIZE), **options)
    workdir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="chaos-"))
    started = time.monotonic()
    try:
        result = run_chaos(str(workdir / "data"), config, say=print)
    finally:
        if not args.data_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(summary(result))
    fatal = [e for log in result.producers for e in log.errors if e.startswith("FATAL")]
    failures = {name: check(result) for name, check in CHECKS.items()}
    failures["no failed delivery or fatal producer error"] = (
        [f"{result.failed} failed deliveries, {len(fatal)} fatal errors"]
        if result.failed or fatal
        else []
    )
    ok = True
    for name, problems in failures.items():
        print(f"{'FAIL' if problems else 'ok  '} {name}")
        for p in problems[:10]:
            print(f"       {p}")
        ok = ok and not problems
    rate = result.acked / result.seconds if result.seconds else 0.0
    print(
        f"acknowledged {rate:.0f} records/s under chaos; total {time.monotonic() - started:.0f} s"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
