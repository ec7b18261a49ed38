"""``sparklog topics list/describe --data-dir s3://...``: the offline commands on a root on
S3 (the ``s3_server`` fixture: SeaweedFS), built as a broker with its log there leaves it:
a log written on a local disk, then its bucket-side files copied
(``tests.support.s3.copy_to_bucket``). Endpoint and credentials reach the command as the
standard ``AWS_*`` variables."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ..support.s3 import SeaweedS3, copy_to_bucket, write_log
from .helpers import run


@pytest.fixture
def s3_root(s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    write_log(str(tmp_path / "local"))
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    copy_to_bucket(str(tmp_path / "local"), uri, s3_server.env())
    return uri


def test_topics_list_on_an_s3_root(s3_root: str) -> None:
    out = run("topics", "list", "--data-dir", s3_root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["t"]


def test_topics_describe_on_an_s3_root_shows_the_sealed_prefix(s3_root: str) -> None:
    """The partition's high watermark is the end of its sealed prefix: what readers of the
    bucket see (the rolled and active segments are in the broker's cache only)."""
    out = run("topics", "describe", "t", "--json", "--data-dir", s3_root)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["partitions"] == 1
    [state] = doc["partition_state"]
    assert (state["log_start_offset"], state["high_watermark"]) == (0, 60)
    assert (state["segments"], state["sealed_segments"]) == (5, 3)


def test_a_missing_s3_root_is_an_error_naming_it(
    s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    missing = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    out = run("topics", "list", "--data-dir", missing)
    assert out.returncode != 0
    assert f"{missing}: no sparklog storage here" in out.stderr
