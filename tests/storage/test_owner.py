"""The owner record of a storage root (``sparklog.storage.owner``): the first claimant
writes it, the same kind of writer adopts it, any other is refused naming the owner."""

from __future__ import annotations

import os

import pytest

from sparklog.errors import DataDirNotDirectoryError, ForeignWriterError, StorageOwnedError
from sparklog.storage import names, owner
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.owner import Owner

from .helpers import open_log, records


def test_the_first_claimant_creates_the_record_and_its_root(fs: LocalFileSystem, root: str) -> None:
    wanted = Owner.of_cluster("prod", "127.0.0.1:2379")
    assert owner.claim(fs, root, wanted) == wanted
    assert owner.read(fs, root) == wanted
    assert owner.claim(fs, root, Owner.of_cluster("prod", "10.0.0.9:2379")) == wanted


def test_an_embedded_broker_is_refused_a_clusters_root(fs: LocalFileSystem, root: str) -> None:
    owner.claim(fs, root, Owner.of_cluster("prod", "127.0.0.1:2379"))
    with pytest.raises(StorageOwnedError) as e:
        owner.claim(fs, root, Owner.embedded())
    msg = str(e.value)
    assert "belongs to cluster 'prod' (etcd 127.0.0.1:2379)" in msg
    assert "an embedded broker (no --etcd) may not write it" in msg
    assert "--etcd 127.0.0.1:2379 --cluster prod" in msg
    assert names.owner_path(root) in msg


def test_a_cluster_broker_is_refused_an_embedded_brokers_root(
    fs: LocalFileSystem, root: str
) -> None:
    owner.claim(fs, root, Owner.embedded())
    with pytest.raises(StorageOwnedError, match="belongs to an embedded broker .* a broker "
                       "of cluster 'prod' may not write it: run it without --etcd"):  # fmt: skip
        owner.claim(fs, root, Owner.of_cluster("prod", "127.0.0.1:2379"))


def test_a_cluster_broker_is_refused_another_clusters_root(fs: LocalFileSystem, root: str) -> None:
    owner.claim(fs, root, Owner.of_cluster("prod", "127.0.0.1:2379"))
    with pytest.raises(StorageOwnedError, match="start it with --cluster prod"):
        owner.claim(fs, root, Owner.of_cluster("test", "127.0.0.1:2379"))


def test_a_root_written_before_owner_records_is_adopted_by_its_first_claimant(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    log.append(records(0, 3))
    log.close()
    assert owner.read(fs, root) is None
    wanted = Owner.of_cluster("prod", "127.0.0.1:2379")
    assert owner.claim(fs, root, wanted) == wanted
    with pytest.raises(StorageOwnedError):
        owner.claim(fs, root, Owner.embedded())


def test_a_data_dir_that_is_a_file_is_refused(fs: LocalFileSystem, tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "afile")
    with open(path, "w") as f:
        f.write("x")
    with pytest.raises(DataDirNotDirectoryError, match="is a file, not a directory"):
        owner.claim(fs, path, Owner.embedded())


def test_verify_finds_a_record_that_names_another_writer(fs: LocalFileSystem, root: str) -> None:
    mine = owner.claim(fs, root, Owner.embedded())
    assert owner.verify(fs, root, mine) is None
    os.unlink(names.owner_path(root))
    assert owner.verify(fs, root, mine) is None  # claimed again
    assert owner.read(fs, root) is not None
    os.unlink(names.owner_path(root))
    owner.claim(fs, root, Owner.of_cluster("prod", "127.0.0.1:2379"))
    found = owner.verify(fs, root, mine)
    assert isinstance(found, ForeignWriterError)
    assert "cluster 'prod'" in str(found)
