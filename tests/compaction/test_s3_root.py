"""The retention job on a storage root on S3 (the ``s3_server`` fixture: SeaweedFS), built
as a broker with its log there leaves it (``tests.support.s3.copy_to_bucket``): it plans
on the manifests in the bucket and commits there, and asks nothing for the active segment,
which is not in the bucket. (Compaction on S3 needs Spark: tests/datasource/test_s3_root.py.)
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sparklog.cli.jobs import retention_main
from sparklog.storage import Storage

from ..support.s3 import SeaweedS3, copy_to_bucket, write_log


def test_the_retention_job_on_an_s3_root(
    s3_server: SeaweedS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every record is older than retention.ms: the job drops the three sealed segments
    and the rolled one (the active segment is held), and a reader of the bucket sees the
    new log start."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    write_log(str(tmp_path / "local"), configs={"retention.ms": "3600000"})
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    copy_to_bucket(str(tmp_path / "local"), uri, s3_server.env())
    assert retention_main(["--data-dir", uri]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("retention t-0: deleted 4 segments (80 records") for ln in out), out
    view = Storage(uri).require().reader("t", 0).view()
    assert view.log_start_offset == view.high_watermark == 80
    assert [s.name for s in view.manifest.segments] == ["00000000000000000080.arrow"]
