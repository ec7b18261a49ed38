"""A real broker process on loopback for each test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog_testkit.processes import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["ROOT", "BrokerProcess", "broker"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path / "broker-data")).start()
    try:
        yield b
    finally:
        b.stop()
        b.kill()
