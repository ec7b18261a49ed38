"""A storage root (``sparklog.storage.store``): a path that holds no sparklog storage is
called that, with the path, wherever a reader, job or offline tool opens it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.errors import NoStorageError
from sparklog.storage import Storage


def test_a_missing_path_holds_no_storage(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(NoStorageError, match=f"{missing}: no sparklog storage here: .*not exist"):
        Storage(str(missing)).require()


def test_a_file_holds_no_storage(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NoStorageError, match="is a file"):
        Storage(str(f)).require()


def test_a_directory_without_topics_holds_no_storage(tmp_path: Path) -> None:
    with pytest.raises(NoStorageError, match="no topics/"):
        Storage(str(tmp_path)).require()


def test_a_root_with_a_topic_is_storage(root: str) -> None:
    storage = Storage(root)
    storage.topics.create("t", 1)
    assert storage.require() is storage
