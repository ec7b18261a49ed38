"""Durability under SIGKILL: idempotent acks=all producers against a broker killed and
restarted at random moments (see sparklog_testkit.chaos for the scenario and the property).

One chaos run per module (about 40 s at the CI size: 12 kills in 36 s); each test checks
one part of the property on it. Bigger runs: SPARKLOG_CHAOS_KILLS, SPARKLOG_CHAOS_SECONDS,
SPARKLOG_CHAOS_PRODUCERS, SPARKLOG_CHAOS_PARTITIONS, SPARKLOG_CHAOS_RATE,
SPARKLOG_CHAOS_SEED, or bench/chaos.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparklog_testkit.chaos import (
    ChaosConfig,
    ChaosResult,
    check_acknowledged_exactly_once,
    check_nothing_unsent,
    check_offsets,
    check_send_order,
    run_chaos,
    summary,
)

pytestmark = pytest.mark.slow

MIN_KILLS = 10


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosResult]:
    config = ChaosConfig.from_env()
    data_dir = str(tmp_path_factory.mktemp("chaos") / "data")
    result = run_chaos(data_dir, config, say=print)
    print(summary(result))
    yield result


def _explain(problems: list[str], result: ChaosResult) -> str:
    shown = "\n".join(problems[:20])
    return f"{len(problems)} problems (first 20):\n{shown}\n{summary(result)}"


def test_the_broker_was_killed_while_records_were_acknowledged(chaos: ChaosResult) -> None:
    assert chaos.kills >= min(MIN_KILLS, chaos.config.kills)
    for log in chaos.producers:
        assert log.acked, f"producer {log.index} got no acknowledgement\n{summary(chaos)}"
    assert chaos.acked >= chaos.sent // 2, summary(chaos)


def test_every_acknowledged_record_is_stored_once_at_its_offset(chaos: ChaosResult) -> None:
    problems = check_acknowledged_exactly_once(chaos)
    assert not problems, _explain(problems, chaos)


def test_acknowledged_records_keep_each_producers_send_order(chaos: ChaosResult) -> None:
    problems = check_send_order(chaos)
    assert not problems, _explain(problems, chaos)


def test_offsets_are_dense_and_never_reused(chaos: ChaosResult) -> None:
    problems = check_offsets(chaos)
    assert not problems, _explain(problems, chaos)


def test_nothing_is_stored_that_was_never_sent(chaos: ChaosResult) -> None:
    problems = check_nothing_unsent(chaos)
    assert not problems, _explain(problems, chaos)


def test_idempotent_producers_ride_out_the_kills(chaos: ChaosResult) -> None:
    """With retries and a long message timeout, no delivery fails and no producer hits a
    fatal error (which would mean the broker broke the idempotence protocol)."""
    fatal = [e for log in chaos.producers for e in log.errors if e.startswith("FATAL")]
    unflushed = sum(log.unflushed for log in chaos.producers)
    assert (chaos.failed, fatal, unflushed) == (0, [], 0), summary(chaos)
