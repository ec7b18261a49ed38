"""Burrow's rules for a consumer's lag status
(``sparklog.broker.observability.lag``), one per test."""

from __future__ import annotations

import pytest

from sparklog.broker.observability.lag import (
    OK,
    REWIND,
    STALL,
    STOP,
    WARN,
    LagMonitor,
    Sample,
    evaluate,
    worst,
)

SPAN = 100.0  # the window's span, seconds


def window(*points: tuple[int, int, int], at: float = 0.0, step: float = 10.0) -> list[Sample]:
    """Samples ``step`` seconds apart: (committed, commit time s, log end) each."""
    return [Sample(at + i * step, c, int(t * 1000), end) for i, (c, t, end) in enumerate(points)]


def test_a_consumer_that_caught_up_once_in_the_window_is_ok() -> None:
    w = window((10, 0, 50), (50, 10, 50), (60, 20, 90))
    assert evaluate(w, now_s=25, span_s=SPAN) == OK


def test_an_offset_that_went_back_is_a_rewind() -> None:
    w = window((40, 0, 100), (20, 10, 110), (30, 20, 120))
    assert evaluate(w, now_s=25, span_s=SPAN) == REWIND


def test_no_commit_for_longer_than_the_window_with_lag_is_a_stop() -> None:
    w = window((40, 0, 100), (40, 0, 100), (40, 0, 100))
    assert evaluate(w, now_s=SPAN + 1, span_s=SPAN) == STOP


def test_commits_that_do_not_move_the_offset_with_lag_are_a_stall() -> None:
    w = window((40, 0, 100), (40, 10, 100), (40, 20, 100))
    assert evaluate(w, now_s=25, span_s=SPAN) == STALL


def test_lag_growing_through_the_window_while_the_consumer_moves_is_a_warning() -> None:
    w = window((10, 0, 50), (20, 10, 70), (30, 20, 95))
    assert evaluate(w, now_s=25, span_s=SPAN) == WARN


def test_lag_that_shrinks_at_some_point_is_ok() -> None:
    w = window((10, 0, 50), (20, 10, 70), (60, 20, 80))
    assert evaluate(w, now_s=25, span_s=SPAN) == OK


def test_a_steady_lag_while_the_consumer_keeps_up_is_ok() -> None:
    w = window((10, 0, 50), (20, 10, 60), (30, 20, 70))
    assert evaluate(w, now_s=25, span_s=SPAN) == OK


def test_no_samples_is_ok() -> None:
    assert evaluate([], now_s=0, span_s=SPAN) == OK


def test_a_group_is_as_bad_as_its_worst_partition() -> None:
    assert worst([OK, WARN, OK]) == WARN
    assert worst([STALL, REWIND]) == STALL
    assert worst([STOP, STALL, OK]) == STOP
    assert worst([]) == OK


def test_the_monitor_samples_at_most_once_an_interval_and_keeps_a_window() -> None:
    m = LagMonitor(window=3, interval_s=10)
    key = ("g", "t", 0)
    for i in range(10):  # one a second: every tenth is kept
        m.sample(key, 40, 0, 100, now_s=float(i))
    assert m.status(key, now_s=9) == OK  # one sample: no window yet
    for t in (10, 20, 30, 40):
        m.sample(key, 40, t * 1000, 100, now_s=float(t))  # committing, not moving
    assert m.status(key, now_s=40) == STALL
    m.forget(set())
    assert m.status(key, now_s=40) == OK


def test_a_window_needs_two_samples() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        LagMonitor(window=1)
