"""The S3 backend's request counters (sparklog/storage/fs/s3.py: ``RequestCounts``) on a real
S3 server (the ``s3_server`` fixture: SeaweedFS): what each call of the backend counts, per
instance and in the process. The read paths' budgets built on them are
tests/storage/test_s3_readers.py's."""

from __future__ import annotations

import uuid

from sparklog.storage.fs.s3 import S3FileSystem

from ..support.s3 import SeaweedS3


def _root_uri(server: SeaweedS3) -> str:
    return f"s3://{server.bucket}/{uuid.uuid4().hex}"


def test_every_request_is_counted_by_kind(s3_server: SeaweedS3) -> None:
    """Each call of the backend counts its requests by kind, on the instance and in the
    process's total; another instance's counts are its own."""
    from sparklog.storage.fs.s3 import READ_BUFFER_BYTES, REQUEST_KINDS, total_requests

    fs, root = S3FileSystem.from_uri(_root_uri(s3_server), environ=s3_server.env())
    other, _ = S3FileSystem.from_uri(_root_uri(s3_server), environ=s3_server.env())
    assert fs.requests() == dict.fromkeys(REQUEST_KINDS, 0)
    process_before = total_requests()
    path = fs.join(root, "f")
    big = bytes(range(256)) * (3 * READ_BUFFER_BYTES // 256)

    def counted(call: object) -> dict[str, int]:
        before = fs.requests()
        assert callable(call)
        call()
        after = fs.requests()
        return {k: after[k] - before[k] for k in after if after[k] != before[k]}

    assert counted(lambda: fs.write_atomic(path, big)) == {"PUT": 1}
    assert counted(lambda: fs.create_exclusive(fs.join(root, "g"), b"g")) == {"CONDITIONAL_PUT": 1}
    assert counted(lambda: fs.read_bytes(path)) == {"GET": 1}
    assert counted(lambda: fs.size(path)) == {"HEAD": 1}
    assert counted(lambda: fs.listdir(root)) == {"LIST": 1}
    assert counted(lambda: fs.exists(fs.join(root, "nothing"))) == {"HEAD": 1, "LIST": 1}

    def ranged() -> None:
        with fs.open_input(path) as f:
            f.seek(10)
            assert f.read(5) == big[10:15]
            assert f.read(100) == big[15:115]  # from the same 1 MiB buffer
            f.seek(2 * READ_BUFFER_BYTES)
            assert f.read(READ_BUFFER_BYTES + 7) == big[2 * READ_BUFFER_BYTES :]

    assert counted(ranged) == {"HEAD": 1, "RANGED_GET": 2}

    def written() -> None:
        with fs.open_output(fs.join(root, "h")) as out:
            out.write(b"a")
            out.write(b"b")

    assert counted(written) == {"PUT": 1}
    assert counted(lambda: fs.delete(fs.join(root, "h"))) == {"DELETE": 1}
    assert other.requests() == dict.fromkeys(REQUEST_KINDS, 0)
    process = total_requests()
    assert {k: process[k] - process_before[k] for k in process} == fs.requests()
