"""Fixtures of the storage tests: the recovery tests' written logs (the real S3 server,
``s3_server``, is tests/conftest.py's)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.storage.fs.local import LocalFileSystem

from .recovery_helpers import WrittenLog, _write_standard_log


@pytest.fixture
def written(fs: LocalFileSystem, root: str) -> WrittenLog:
    return _write_standard_log(fs, root)


@pytest.fixture
def fast_root(tmp_path: Path) -> Iterator[str]:
    """A storage root on tmpfs when there is one, else ``root``'s disk.

    For the tests that reopen the log hundreds of times: every reopen after damage fsyncs
    the truncation, which costs ~10 ms on a disk and nothing on tmpfs. What they check does
    not depend on durability.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield str(tmp_path / "data")
        return
    directory = tempfile.mkdtemp(prefix="sparklog-test-recovery-", dir=shm)
    try:
        yield f"{directory}/data"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def written_fast(fs: LocalFileSystem, fast_root: str) -> WrittenLog:
    return _write_standard_log(fs, fast_root)
