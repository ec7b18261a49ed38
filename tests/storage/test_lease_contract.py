"""The contract every lease backend keeps (``sparklog.storage.lease``), run against each.

Backends: the local ``flock`` backend on a storage root on disk (lease files in the root),
and the same backend as ``Storage.leases`` picks it for a root that is not on this disk
(lease files in a directory of this host). Cluster mode's etcd backend joins the list.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from sparklog.errors import (
    CompactionRunningError,
    DataDirLockedError,
    LeaseHeldError,
    LeaseLostError,
)
from sparklog.storage import Storage
from sparklog.storage.fs.arrow import ArrowFileSystem
from sparklog.storage.lease import DATA_DIR, LeaseStore, compaction_lease
from sparklog.storage.lease.local import LocalLeaseStore

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    """A lease store, and how a child process opens the same one (Python source)."""

    store: LeaseStore
    child_code: str


def _local(tmp_path: Path) -> Backend:
    storage = Storage(str(tmp_path / "data"))
    store = storage.leases
    assert isinstance(store, LocalLeaseStore) and store.directory == storage.root
    return Backend(store, f"LocalLeaseStore({store.directory!r})")


def _elsewhere(tmp_path: Path) -> Backend:
    storage = Storage(f"in-memory-{tmp_path.name}", fs=ArrowFileSystem(pafs._MockFileSystem()))
    store = storage.leases
    assert isinstance(store, LocalLeaseStore) and storage.root not in store.directory
    return Backend(store, f"LocalLeaseStore({store.directory!r})")


BACKENDS: dict[str, Callable[[Path], Backend]] = {"local": _local, "host-local": _elsewhere}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield BACKENDS[request.param](tmp_path)


def test_an_acquired_lease_has_a_positive_epoch_and_is_held(backend: Backend) -> None:
    with backend.store.acquire(DATA_DIR, "test") as lease:
        assert lease.epoch >= 1 and lease.name == DATA_DIR and lease.holder == "test"
        assert not lease.lost
        lease.renew()


def test_second_lease_on_the_same_dir_fails_naming_the_holder(backend: Backend) -> None:
    with (
        backend.store.acquire(DATA_DIR, "first holder"),
        pytest.raises(DataDirLockedError, match="locked.*first holder"),
    ):
        backend.store.acquire(DATA_DIR, "second")


def test_lease_is_free_again_after_release(backend: Backend) -> None:
    backend.store.acquire(DATA_DIR, "a").release()
    backend.store.acquire(DATA_DIR, "b").release()


def test_every_acquisition_has_a_higher_epoch(backend: Backend) -> None:
    epochs = []
    for holder in ("a", "b", "c"):
        with backend.store.acquire(DATA_DIR, holder) as lease:
            epochs.append(lease.epoch)
    assert epochs == sorted(set(epochs)) and len(epochs) == 3


def test_a_released_lease_is_lost_and_cannot_be_renewed(backend: Backend) -> None:
    lease = backend.store.acquire(DATA_DIR, "a")
    lease.release()
    lease.release()  # idempotent
    assert lease.lost
    with pytest.raises(LeaseLostError):
        lease.renew()


def test_lease_of_a_killed_process_is_released(backend: Backend) -> None:
    code = textwrap.dedent(
        f"""
        import time
        from sparklog.storage.lease.local import LocalLeaseStore
        lease = {backend.child_code}.acquire("data-dir", "child")
        print("locked", lease.epoch, flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        assert child.stdout is not None
        word, epoch = child.stdout.readline().split()
        assert word == b"locked"
        with pytest.raises(DataDirLockedError, match=rf"\(child, pid {child.pid} on host "):
            backend.store.acquire(DATA_DIR, "parent")
    finally:
        child.kill()
        child.wait()
    with backend.store.acquire(DATA_DIR, "parent") as lease:
        assert lease.epoch > int(epoch)


def test_a_second_compaction_lease_on_a_topic_fails_naming_the_topic(backend: Backend) -> None:
    with (
        backend.store.acquire(compaction_lease("orders"), "job 1"),
        pytest.raises(CompactionRunningError, match="orders"),
    ):
        backend.store.acquire(compaction_lease("orders"), "job 2")


def test_leases_of_different_names_are_independent(backend: Backend) -> None:
    with (
        backend.store.acquire(compaction_lease("a"), "x"),
        backend.store.acquire(compaction_lease("b"), "x"),
        backend.store.acquire(DATA_DIR, "x"),
        backend.store.acquire("partition/t/0", "x"),
    ):
        pass


def test_any_other_held_name_is_a_lease_held_error(backend: Backend) -> None:
    with (
        backend.store.acquire("partition/t/0", "leader"),
        pytest.raises(LeaseHeldError, match="partition/t/0"),
    ):
        backend.store.acquire("partition/t/0", "follower")


@pytest.mark.parametrize("name", ["", "a//b", "../x", "a/../b", "sp ace"])
def test_a_bad_lease_name_is_refused(backend: Backend, name: str) -> None:
    with pytest.raises(ValueError, match="lease name"):
        backend.store.acquire(name, "x")
