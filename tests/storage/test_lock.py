from __future__ import annotations

import subprocess
import sys

import pytest

from sparklog.errors import CompactionRunningError, DataDirLockedError
from sparklog.storage.lock import CompactionLock, DataDirLock


def test_second_lock_on_the_same_dir_fails(root: str) -> None:
    with DataDirLock(root), pytest.raises(DataDirLockedError, match="locked"):
        DataDirLock(root).acquire()


def test_lock_is_free_again_after_release(root: str) -> None:
    DataDirLock(root).acquire().release()
    DataDirLock(root).acquire().release()


def test_lock_of_a_killed_process_is_released(root: str) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sparklog.storage.lock import CompactionLock, DataDirLock;"
            f"DataDirLock({root!r}).acquire(); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"locked"
    with pytest.raises(DataDirLockedError, match="pid="):
        DataDirLock(root).acquire()
    child.kill()
    child.wait()
    DataDirLock(root).acquire().release()


def test_a_second_compaction_lock_on_a_topic_fails_naming_the_topic(root: str) -> None:
    with CompactionLock(root, "orders"), pytest.raises(CompactionRunningError, match="orders"):
        CompactionLock(root, "orders").acquire()


def test_compaction_locks_of_two_topics_are_independent(root: str) -> None:
    with CompactionLock(root, "a"), CompactionLock(root, "b"), DataDirLock(root):
        pass
