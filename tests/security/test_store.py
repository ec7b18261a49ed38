"""Users and ACLs are durable versioned files shared by every process on a storage root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparklog.errors import CorruptMetadataError
from sparklog.security.acls import AclBinding, AclFilter, AclOperation, PatternType, Permission
from sparklog.security.acls import ResourceType as RT
from sparklog.security.scram import make_credential
from sparklog.security.store import KEEP, AclStore, CredentialStore
from sparklog.storage import Storage


def test_credentials_persist_without_the_password(tmp_path: Path) -> None:
    store = CredentialStore(Storage(str(tmp_path)))
    store.upsert("alice", make_credential("SCRAM-SHA-256", "s3cret-pass"))
    again = CredentialStore(Storage(str(tmp_path)))
    cred = again.get("alice", "SCRAM-SHA-256")
    assert cred is not None and cred.check_password("s3cret-pass")
    assert not cred.check_password("wrong")
    for f in (tmp_path / "security" / "users").iterdir():
        assert b"s3cret-pass" not in f.read_bytes()


def test_two_writers_on_one_root_both_land_and_readers_refresh(tmp_path: Path) -> None:
    a, b = CredentialStore(Storage(str(tmp_path))), CredentialStore(Storage(str(tmp_path)))
    a.upsert("alice", make_credential("SCRAM-SHA-256", "pw-a"))
    b.upsert("bob", make_credential("SCRAM-SHA-512", "pw-b"))  # b's view was stale
    assert set(b.users()) == {"alice", "bob"}
    assert set(a.users()) == {"alice"}
    assert a.refresh() and set(a.users()) == {"alice", "bob"}
    assert not a.refresh()


def test_deleting_a_credential_and_old_versions_are_pruned(tmp_path: Path) -> None:
    store = CredentialStore(Storage(str(tmp_path)))
    for i in range(KEEP + 3):
        store.upsert("u", make_credential("SCRAM-SHA-256", f"pw{i}"))
    assert len(list((tmp_path / "security" / "users").iterdir())) == KEEP
    assert store.delete("u", "SCRAM-SHA-256") and not store.delete("u", "SCRAM-SHA-256")
    assert store.users() == {}


def test_acls_are_added_once_and_deleted_by_filter(tmp_path: Path) -> None:
    store = AclStore(Storage(str(tmp_path)))
    read = AclBinding(RT.TOPIC, "t", PatternType.LITERAL, "User:a", "*", AclOperation.READ,
                      Permission.ALLOW)  # fmt: skip
    write = AclBinding(RT.TOPIC, "t", PatternType.LITERAL, "User:b", "*", AclOperation.WRITE,
                       Permission.ALLOW)  # fmt: skip
    store.add([read, write, read])
    assert AclStore(Storage(str(tmp_path))).bindings() == (read, write)
    matched = store.delete([AclFilter(principal="User:b")])
    assert matched == [[write]] and store.bindings() == (read,)


def test_an_unreadable_version_is_reported_with_its_path(tmp_path: Path) -> None:
    AclStore(Storage(str(tmp_path))).add([])
    directory = tmp_path / "security" / "acls"
    (latest,) = sorted(directory.iterdir())
    latest.write_text(json.dumps({"format": 99}))
    with pytest.raises(CorruptMetadataError, match=str(latest.name)):
        AclStore(Storage(str(tmp_path)))
