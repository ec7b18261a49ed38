from __future__ import annotations

import threading

import pytest

from sparklog.errors import CorruptMetadataError
from sparklog.storage import checkpoints, names
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.reader import PartitionReader

from .helpers import open_log, records, values


def test_position_round_trips(fs: LocalFileSystem, root: str) -> None:
    fs.makedirs(root)
    pos = LogPosition(100, 4096, 150)
    checkpoints.write_position(fs, root, names.HIGH_WATERMARK_FILE, pos)
    assert checkpoints.read_high_watermark(fs, root) == pos
    assert fs.size(f"{root}/{names.HIGH_WATERMARK_FILE}") == checkpoints.SIZE


def test_missing_checkpoint_is_none(fs: LocalFileSystem, root: str) -> None:
    assert checkpoints.read_high_watermark(fs, root) is None


@pytest.mark.parametrize("flip", [0, 5, 9, 31])
def test_a_flipped_bit_fails_the_crc(fs: LocalFileSystem, root: str, flip: int) -> None:
    fs.makedirs(root)
    data = bytearray(LogPosition(1, 2, 3).to_bytes())
    data[flip] ^= 0x10
    fs.write_new(f"{root}/{names.HIGH_WATERMARK_FILE}", bytes(data))
    with pytest.raises(CorruptMetadataError, match="high-watermark"):
        checkpoints.read_high_watermark(fs, root)


def test_reader_never_sees_a_torn_checkpoint(fs: LocalFileSystem, root: str) -> None:
    fs.makedirs(root)
    checkpoints.write_position(fs, root, names.HIGH_WATERMARK_FILE, LogPosition(0, 0, 0))
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            pos = LogPosition(i, i * 8, i * 3)
            checkpoints.write_position(fs, root, names.HIGH_WATERMARK_FILE, pos)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(2000):
            pos = checkpoints.read_high_watermark(fs, root)
            assert pos is not None
            assert (pos.position, pos.offset) == (pos.segment * 8, pos.segment * 3)
    finally:
        stop.set()
        t.join()


def test_unreadable_high_watermark_shows_only_rolled_segments(
    fs: LocalFileSystem, root: str
) -> None:
    log = open_log(fs, root)
    log.append(records(0, 5))
    log.roll()
    log.append(records(5, 5))
    with open(f"{log.path}/{names.HIGH_WATERMARK_FILE}", "wb") as f:
        f.write(b"garbage")
    view = PartitionReader(fs, root, "t", 0).view()
    assert view.high_watermark == 5
    assert values(view.batches(0)) == [b"v%d" % i for i in range(5)]
