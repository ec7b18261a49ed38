"""Fixtures of the consumer-group tests: group members in child processes
(``helpers.Member``) that are always reaped, on the broker of ``tests/broker/conftest.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparklog_testkit.processes import BrokerProcess

from .helpers import Member


@pytest.fixture
def spawn(broker: BrokerProcess) -> Iterator[Callable[..., Member]]:
    """``spawn(group, topic, name, **options)``: a ``Member`` on the test's broker."""
    started: list[Member] = []

    def make(group: str, topic: str, name: str, **options: Any) -> Member:
        m = Member(broker.bootstrap, group, topic, name, **options)
        started.append(m)
        return m

    yield make
    for m in started:
        m.cleanup()
