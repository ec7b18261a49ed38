"""The ``Sealer`` on its own: everything it uses is handed to it. In a ``PartitionLog`` its
``latest`` is the log's ``refresh`` and its ``commit`` the log's fenced commit; here they are
a ``ManifestStore``'s, with no log open, which a sealer reaching into a log could not do."""

from __future__ import annotations

import pyarrow as pa

from sparklog.storage import names, transforms
from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.manifest import Manifest, ManifestStore
from sparklog.storage.reader import PartitionReader
from sparklog.storage.records import make_records
from sparklog.storage.sealed import ROW_GROUP_ROWS
from sparklog.storage.sealing import Sealer

TOPIC = "t"


def _rolled_log(fs: LocalFileSystem, root: str) -> str:
    """A closed partition whose segment [0, 3) is rolled and not sealed; its directory."""
    log = PartitionLog.open(fs, root, TOPIC, 0, TopicConfig(), auto_seal=False)
    log.append(make_records([b"a", b"b", b"c"]))
    log.roll()
    log.close()
    return names.partition_dir(root, TOPIC, 0)


def _sealer(fs: LocalFileSystem, path: str, commits: list[str]) -> Sealer:
    store = ManifestStore(fs, path, writer="test")

    def latest() -> Manifest:
        m = store.latest()
        assert m is not None
        return m

    def commit(t: transforms.Transform) -> Manifest:
        commits.append(type(t).__name__)
        return store.commit(t)

    return Sealer(
        fs, path, "t-0", row_group_rows=ROW_GROUP_ROWS, epoch=None, latest=latest, commit=commit
    )


def test_a_sealer_seals_through_the_inputs_it_is_given(fs: LocalFileSystem, root: str) -> None:
    path = _rolled_log(fs, root)
    commits: list[str] = []
    sealer = _sealer(fs, path, commits)
    assert sealer.seal_pending() == [names.segment_name(0)]
    assert commits == ["Seal"]
    view = PartitionReader(fs, root, TOPIC, 0).view()
    assert view.manifest.unsealed_rolled == []
    assert pa.Table.from_batches(view.read(0)).column("value").to_pylist() == [b"a", b"b", b"c"]


def test_background_seals_are_waited_for(fs: LocalFileSystem, root: str) -> None:
    path = _rolled_log(fs, root)
    commits: list[str] = []
    sealer = _sealer(fs, path, commits)
    sealer.seal_in_background()
    sealer.wait()
    assert commits == ["Seal"]
    assert all(f.done() for f in sealer.pending())
