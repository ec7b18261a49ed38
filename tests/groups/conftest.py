"""Fixtures of the consumer-group tests: a real broker process, and group members in child
processes (``helpers.Member``) that are always reaped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.conftest import BrokerProcess

from .helpers import Member


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path / "broker-data")).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()


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
