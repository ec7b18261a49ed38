"""The S3 backend (sparklog/storage/fs/s3.py) on a real S3 server: SeaweedFS 4.48, started by
the ``s3_server`` fixture. The filesystem contract runs on it in test_fs_contract.py; here are
what only S3 has: create-if-absent raced by processes, the storage code's commit and reader
on the backend, the in-bucket layout, endpoint and credentials from the ``AWS_*`` variables,
and the errors of a wrong endpoint, a missing bucket and refused credentials. Each test
works under a prefix of its own.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import obstore
import pytest
from obstore.store import S3Store

from sparklog.errors import ObjectStoreError
from sparklog.storage.fs.s3 import DIR_MARKER, S3FileSystem, settings_from_env
from sparklog.storage.records import make_records
from sparklog.storage.store import Storage, filesystem_for
from sparklog.storage.versioned import VersionedFiles
from sparklog_testkit.processes import die_with_parent

from ..support.s3 import SeaweedS3

RACE_CHILD = Path(__file__).with_name("s3_race_child.py")
REPO = Path(__file__).resolve().parents[2]


def _root_uri(server: SeaweedS3) -> str:
    return f"s3://{server.bucket}/{uuid.uuid4().hex}"


def _raw_store(server: SeaweedS3) -> S3Store:
    """A client of the bucket outside the backend, to look at what it wrote."""
    env = server.env()
    return S3Store(
        server.bucket,
        endpoint=server.endpoint,
        region=env["AWS_REGION"],
        access_key_id=env["AWS_ACCESS_KEY_ID"],
        secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        client_options={"allow_http": True},
    )


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------- create-if-absent


def test_create_exclusive_race_between_processes_has_one_winner_per_key(
    s3_server: SeaweedS3,
) -> None:
    """The manifest commit primitive across hosts: four processes (four threads each) create
    the same 16 keys at the same moment, each in an order of its own; every key has exactly
    one winner, and the object holds that winner's bytes. Processes, not threads, so no
    lock of this process could be what makes it exclusive: only the store's conditional PUT
    (If-None-Match: *) can. The same race through pyarrow's S3FileSystem (fs/arrow.py's
    check-then-write) gave keys two winners when tried here."""
    uri, writers, keys = _root_uri(s3_server), 4, 16
    env = {**os.environ, **s3_server.env(), "PYTHONPATH": str(REPO)}
    children = [
        subprocess.Popen(
            [sys.executable, str(RACE_CHILD), uri, str(w), str(keys)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        for w in range(writers)
    ]
    won: dict[int, list[int]] = {}
    try:
        for child in children:  # every writer has imported and opened the root
            assert child.stdout is not None
            assert child.stdout.readline() == b"READY\n"
        for child in children:  # then all start at once
            assert child.stdin is not None
            child.stdin.write(b"GO\n")
            child.stdin.flush()
        for w, child in enumerate(children):
            out, err = child.communicate(timeout=300)
            assert child.returncode == 0, err.decode()
            won[w] = json.loads(out)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    wins = Counter(k for ks in won.values() for k in ks)
    assert {k: wins[k] for k in range(keys) if wins[k] != 1} == {}, won
    fs, root = S3FileSystem.from_uri(uri, environ=s3_server.env())
    for w, ks in won.items():
        for k in ks:
            assert fs.read_bytes(fs.join(root, f"k{k}")) == b"writer %d" % w


def test_versioned_files_commit_on_s3(s3_server: SeaweedS3) -> None:
    """The storage code's own commit protocol (VersionedFiles: manifests, topic metadata)
    on the backend: a version is created once, a second create of it loses, the latest is
    read back by listing."""
    fs, root = S3FileSystem.from_uri(_root_uri(s3_server), environ=s3_server.env())
    versions = VersionedFiles(fs, fs.join(root, "manifest"))
    fs.makedirs(versions.directory)
    assert fs.create_exclusive(versions.path(0), b'{"v": 0}')
    assert fs.create_exclusive(versions.path(1), b'{"v": 1}')
    assert not fs.create_exclusive(versions.path(1), b'{"v": "late"}')
    assert versions.versions() == [0, 1]
    assert versions.latest() == (1, b'{"v": 1}')


def test_a_storage_root_copied_to_s3_reads_back_through_the_storage_reader(
    s3_server: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage code's own reader on the backend: a log written on a local disk (sealed
    Parquet segments, manifests, checkpoints, the active segment), its files copied to S3
    object by object, reads back the same records from ``s3://`` - up to the end of the
    sealed prefix, which is all a reader of an S3 root sees (the ``.arrow`` tail lives in
    the writer's cache; tests/storage/test_s3_readers.py)."""
    local = Storage(str(tmp_path / "data"))
    local.topics.create("t", 1, {"segment.bytes": "2048"})
    log = local.open_log("t", 0)
    expected = []
    try:
        for i in range(10):
            values = [b"v%d-%d" % (i, j) for j in range(20)]
            log.append(make_records(values))
            expected += values
    finally:
        log.close()
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    remote = Storage(_root_uri(s3_server))
    for directory, _, files in os.walk(local.root):
        rel = os.path.relpath(directory, local.root)
        target = remote.root if rel == "." else remote.fs.join(remote.root, rel)
        remote.fs.makedirs(target)
        for f in files:
            remote.fs.write_atomic(remote.fs.join(target, f), Path(directory, f).read_bytes())
    assert remote.require().topics.list() == ["t"]
    view = remote.reader("t", 0).view()
    sealed = [s for s in view.manifest.segments if s.sealed]
    assert len(sealed) >= 2
    assert view.high_watermark == sealed[-1].next_offset < len(expected)
    assert [v for b in view.batches(0) for v in b["value"].to_pylist()] == expected[
        : view.high_watermark
    ]


# ---------------------------------------------------------------------------- layout


def test_paths_are_bucket_and_key(s3_server: SeaweedS3) -> None:
    """``s3://bucket/prefix`` opens as root ``bucket/prefix``; a file at ``<root>/a/b`` is the
    object ``prefix/a/b``, which any S3 client reads."""
    uri = _root_uri(s3_server)
    fs, root = S3FileSystem.from_uri(uri, environ=s3_server.env())
    prefix = uri.removeprefix(f"s3://{s3_server.bucket}/")
    assert root == f"{s3_server.bucket}/{prefix}"
    fs.write_atomic(fs.join(root, "a", "b"), b"payload")
    raw = obstore.get(_raw_store(s3_server), f"{prefix}/a/b").bytes()
    assert bytes(raw) == b"payload"


def test_an_empty_directory_is_a_hidden_marker_object(s3_server: SeaweedS3) -> None:
    """S3 has no directories: makedirs leaves ``<dir>/.sparklog-dir``, which the backend
    never lists, so an empty directory exists and lists as on a disk."""
    uri = _root_uri(s3_server)
    fs, root = S3FileSystem.from_uri(uri, environ=s3_server.env())
    prefix = uri.removeprefix(f"s3://{s3_server.bucket}/")
    fs.makedirs(fs.join(root, "topics"))
    raw = obstore.list(_raw_store(s3_server), prefix).collect()
    assert [o["path"] for o in raw] == [f"{prefix}/topics/{DIR_MARKER}"]
    assert fs.is_dir(fs.join(root, "topics"))
    assert fs.listdir(fs.join(root, "topics")) == []
    assert fs.listdir(root) == ["topics"]


def test_a_path_outside_the_bucket_is_refused(s3_server: SeaweedS3) -> None:
    fs, _ = S3FileSystem.from_uri(_root_uri(s3_server), environ=s3_server.env())
    with pytest.raises(ValueError, match="not a path in bucket"):
        fs.exists("another-bucket/key")


def test_s3_backend_is_redundant_and_has_no_append(s3_server: SeaweedS3) -> None:
    fs, root = S3FileSystem.from_uri(_root_uri(s3_server), environ=s3_server.env())
    assert fs.redundant is True
    assert fs.supports_append is False
    with pytest.raises(io.UnsupportedOperation, match="cannot be appended"):
        fs.open_append(fs.join(root, "seg.arrow"))


# ---------------------------------------------------------------------------- configuration


def test_endpoint_and_region_come_from_the_aws_variables() -> None:
    """As the AWS SDKs and CLI take them: the S3-specific endpoint first, then the general
    one; AWS_REGION before AWS_DEFAULT_REGION; us-east-1 for an endpoint without a region."""
    assert settings_from_env({}) == {"endpoint": None, "region": None}
    assert settings_from_env(
        {"AWS_ENDPOINT_URL": "http://general:1", "AWS_ENDPOINT_URL_S3": "http://s3:2"}
    ) == {"endpoint": "http://s3:2", "region": "us-east-1"}
    assert settings_from_env({"AWS_ENDPOINT_URL": "http://general:1"})["endpoint"] == (
        "http://general:1"
    )
    assert settings_from_env({"AWS_DEFAULT_REGION": "eu-west-1"})["region"] == "eu-west-1"
    assert (
        settings_from_env({"AWS_REGION": "eu-north-1", "AWS_DEFAULT_REGION": "eu-west-1"})["region"]
        == "eu-north-1"
    )


def test_storage_opens_an_s3_root_from_the_process_environment(
    s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``filesystem_for`` / ``Storage`` pick the S3 backend for ``s3://`` roots, configured
    by the standard variables alone (here the S3-specific endpoint variable)."""
    env = s3_server.env()
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", env["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
    uri = _root_uri(s3_server)
    fs, root = filesystem_for(uri)
    assert isinstance(fs, S3FileSystem)
    assert fs.endpoint == env["AWS_ENDPOINT_URL"]
    storage = Storage(uri)
    assert isinstance(storage.fs, S3FileSystem)
    assert storage.root == root
    assert storage.executor_root == uri
    storage.fs.makedirs(storage.fs.join(storage.root, "topics"))
    assert storage.require() is storage


# ---------------------------------------------------------------------------- errors


def test_a_missing_bucket_is_a_clear_error(s3_server: SeaweedS3) -> None:
    """The server is started with bucket auto-creation off, as AWS behaves: a write to a
    missing bucket fails, and so does looking at a path in it."""
    fs, root = S3FileSystem.from_uri("s3://no-such-bucket/data", environ=s3_server.env())
    with pytest.raises(ObjectStoreError) as write:
        fs.write_atomic(fs.join(root, "f"), b"x")
    message = str(write.value)
    assert "s3://no-such-bucket" in message
    assert "the bucket does not exist" in message
    assert s3_server.endpoint in message
    with pytest.raises(ObjectStoreError, match="the bucket does not exist"):
        fs.exists(root)
    with pytest.raises(ObjectStoreError, match="the bucket does not exist"):
        fs.listdir(root)


def test_refused_credentials_are_a_clear_error(s3_server: SeaweedS3) -> None:
    env = {**s3_server.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    fs, root = S3FileSystem.from_uri(_root_uri(s3_server), environ=env)
    with pytest.raises(ObjectStoreError) as e:
        fs.create_exclusive(fs.join(root, "v0.json"), b"x")
    message = str(e.value)
    assert f"s3://{s3_server.bucket}" in message
    assert "refused the credentials" in message
    assert "AWS_ACCESS_KEY_ID" in message
    with pytest.raises(ObjectStoreError, match="refused the credentials"):
        fs.read_bytes(fs.join(root, "v0.json"))


def test_an_unreachable_endpoint_is_a_clear_error_within_seconds() -> None:
    """A wrong endpoint (nothing listens) fails after a few quick retries, not after the
    client's default three minutes, naming the endpoint and the variable to check."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    fs, root = S3FileSystem.from_uri("s3://bucket/data", environ=env)
    started = time.monotonic()
    with pytest.raises(ObjectStoreError) as e:
        fs.listdir(root)
    assert time.monotonic() - started < 30
    message = str(e.value)
    assert f"cannot reach {endpoint}" in message
    assert "AWS_ENDPOINT_URL" in message
