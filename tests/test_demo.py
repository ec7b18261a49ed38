"""The end of the embedded demo (``sparklog.demo.tidy``): its directory is removed once the
broker has let go of its data, and kept with ``--keep``. The whole demo runs in
tests/test_project.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.demo import tidy
from sparklog.errors import DataDirLockedError
from sparklog_testkit.processes import BrokerProcess


def test_the_demo_directory_is_removed_only_once_the_broker_let_go(tmp_path: Path) -> None:
    demo = tmp_path / "demo-data"
    broker = BrokerProcess(str(demo / "broker")).start()
    try:
        with pytest.raises(DataDirLockedError):
            tidy(str(demo), broker.data_dir, keep=False)
        assert (demo / "broker").is_dir()
    finally:
        assert broker.stop() == 0
    line = tidy(str(demo), broker.data_dir, keep=False)
    assert line.startswith(f"removed    {demo} (") and "--keep keeps it" in line
    assert not demo.exists()


def test_keep_leaves_the_directory_and_says_how_big_it_is(tmp_path: Path) -> None:
    demo = tmp_path / "demo-data"
    (demo / "exports").mkdir(parents=True)
    (demo / "exports" / "part.parquet").write_bytes(b"x" * 2_500_000)
    assert tidy(str(demo), None, keep=True) == f"kept       {demo} (2.5 MB on disk; --keep)"
    assert (demo / "exports" / "part.parquet").exists()
