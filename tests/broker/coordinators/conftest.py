"""Fixtures of the coordinator tests: a real ``PartitionManager`` over a real storage root
in ``tmp_path`` (what the coordinators run over in an embedded broker), and a data topic.
What the tests share besides fixtures is in ``helpers``, ``group_helpers`` and
``txn_helpers``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.broker.partitions import PartitionManager
from sparklog.storage.store import Storage


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[PartitionManager]:
    """An embedded broker's partitions over a storage root in ``tmp_path``."""
    data = str(tmp_path / "data")
    m = PartitionManager(BrokerConfig(data_dir=data), Storage(data))
    yield m
    m.close()


@pytest.fixture
def topic(manager: PartitionManager) -> str:
    """Topic ``t`` with two partitions (the transactions' data partitions)."""
    manager.create_topic("t", 2, None)
    return "t"
