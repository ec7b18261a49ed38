"""Users (SCRAM credentials) and ACLs, durable in the storage root and shared by every
broker of a cluster.

Layout (each a ``VersionedFiles`` directory, committed by create-if-absent, so brokers and
the offline ``sparklog users`` tool racing for the same version cannot both win)::

    <root>/security/users/<version>.json
        {"format": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": b64, "stored_key": b64,
                                                          "server_key": b64,
                                                          "iterations": 4096}}}}
    <root>/security/acls/<version>.json
        {"format": 1, "acls": [{"resource_type": "TOPIC", "name": "orders",
                                "pattern_type": "LITERAL", "principal": "User:alice",
                                "host": "*", "operation": "READ", "permission": "ALLOW"}]}

A change reads the latest version, applies itself and commits the next one, retrying when
another writer won; the newest ``KEEP`` versions are kept, older ones removed by the
writer. Readers keep the parsed latest version and re-read only when ``refresh`` finds a
newer version number (a directory listing): brokers refresh on their maintenance tick, so
a change made through one broker reaches the others within ``manifest_refresh_ms``.
Passwords are never stored: only what ``sparklog.security.scram`` derives from them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from sparklog.errors import CorruptMetadataError
from sparklog.security.acls import AclBinding, AclFilter
from sparklog.security.scram import ScramCredential
from sparklog.storage import names
from sparklog.storage.versioned import VersionedFiles

KEEP = 10
FORMAT = 1
T = TypeVar("T")
R = TypeVar("R")


class _Document(Generic[T]):
    """The latest version of one versioned JSON document, parsed and cached."""

    def __init__(
        self,
        storage: Any,
        name: str,
        parse: Callable[[dict[str, Any]], T],
        dump: Callable[[T], dict[str, Any]],
        empty: Callable[[], T],
    ) -> None:
        self.fs = storage.fs
        self.files = VersionedFiles(storage.fs, names.security_dir(storage.root, name))
        self._parse, self._dump, self._empty = parse, dump, empty
        self._lock = threading.Lock()
        self._version = -1
        self._value: T = empty()
        self.refresh()

    @property
    def value(self) -> T:
        return self._value

    def _read_latest(self) -> tuple[int, T]:
        found = self.files.latest() if self.fs.exists(self.files.directory) else None
        if found is None:
            return -1, self._empty()
        version, data = found
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            return version, self._parse(doc)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{self.files.path(version)}: unreadable: {e}") from e

    def refresh(self) -> bool:
        """Re-read if a newer version exists; True if the value changed."""
        versions = self.files.versions() if self.fs.exists(self.files.directory) else []
        if (versions[-1] if versions else -1) == self._version:
            return False
        with self._lock:
            self._version, self._value = self._read_latest()
        return True

    def update(self, change: Callable[[T], tuple[T, R]]) -> R:
        """Apply ``change`` (current -> (new, result)) as the next version."""
        for _ in range(20):
            version, current = self._read_latest()
            new, result = change(current)
            doc = {"format": FORMAT, **self._dump(new)}
            self.fs.makedirs(self.files.directory)
            if self.files.try_commit(version + 1, json.dumps(doc, indent=1).encode()):
                with self._lock:
                    self._version, self._value = version + 1, new
                for old in self.files.versions()[:-KEEP]:
                    self.files.delete(old)
                return result
        raise CorruptMetadataError(f"{self.files.directory}: changed concurrently too often")


Users = dict[str, dict[str, ScramCredential]]


class CredentialStore:
    """Every user's SCRAM credentials (see the module docstring)."""

    def __init__(self, storage: Any) -> None:
        self._doc: _Document[Users] = _Document(
            storage, "users", _parse_users, lambda u: {"users": _dump_users(u)}, dict
        )

    def refresh(self) -> bool:
        return self._doc.refresh()

    def users(self) -> Users:
        return self._doc.value

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._doc.value.get(user, {}).get(mechanism)

    def upsert(self, user: str, credential: ScramCredential) -> None:
        _check_user(user)

        def change(users: Users) -> tuple[Users, None]:
            new = {u: dict(m) for u, m in users.items()}
            new.setdefault(user, {})[credential.mechanism] = credential
            return new, None

        self._doc.update(change)

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove one credential; False if there was none."""

        def change(users: Users) -> tuple[Users, bool]:
            if mechanism not in users.get(user, {}):
                return users, False
            new = {u: dict(m) for u, m in users.items()}
            del new[user][mechanism]
            if not new[user]:
                del new[user]
            return new, True

        return self._doc.update(change)

    def alter(
        self, upserts: Iterable[tuple[str, ScramCredential]], deletes: Iterable[tuple[str, str]]
    ) -> None:
        """Several changes as one version (AlterUserScramCredentials)."""
        ups, dels = list(upserts), list(deletes)
        for user, _ in ups:
            _check_user(user)

        def change(users: Users) -> tuple[Users, None]:
            new = {u: dict(m) for u, m in users.items()}
            for user, mechanism in dels:
                new.get(user, {}).pop(mechanism, None)
                if user in new and not new[user]:
                    del new[user]
            for user, cred in ups:
                new.setdefault(user, {})[cred.mechanism] = cred
            return new, None

        self._doc.update(change)


def _check_user(user: str) -> None:
    if not user or len(user) > 255 or any(ord(c) < 32 for c in user):
        raise ValueError(f"invalid user name {user!r}: 1-255 printable characters")


def _parse_users(doc: dict[str, Any]) -> Users:
    return {
        user: {mech: ScramCredential.from_json(mech, d) for mech, d in mechs.items()}
        for user, mechs in doc["users"].items()
    }


def _dump_users(users: Users) -> dict[str, Any]:
    return {user: {m: c.to_json() for m, c in mechs.items()} for user, mechs in users.items()}


class AclStore:
    """Every ACL binding (see the module docstring)."""

    def __init__(self, storage: Any) -> None:
        self._doc: _Document[tuple[AclBinding, ...]] = _Document(
            storage,
            "acls",
            lambda d: tuple(AclBinding.from_json(a) for a in d["acls"]),
            lambda acls: {"acls": [a.to_json() for a in acls]},
            tuple,
        )

    def refresh(self) -> bool:
        return self._doc.refresh()

    def bindings(self) -> tuple[AclBinding, ...]:
        return self._doc.value

    def add(self, bindings: Iterable[AclBinding]) -> None:
        new_ones = [b.check() for b in bindings]

        def change(acls: tuple[AclBinding, ...]) -> tuple[tuple[AclBinding, ...], None]:
            have = set(acls)
            out = list(acls)
            for b in new_ones:
                if b not in have:
                    have.add(b)
                    out.append(b)
            return tuple(out), None

        self._doc.update(change)

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding some filter matches; what each filter matched."""

        def change(
            acls: tuple[AclBinding, ...],
        ) -> tuple[tuple[AclBinding, ...], list[list[AclBinding]]]:
            matched = [[b for b in acls if f.matches(b)] for f in filters]
            gone = {b for m in matched for b in m}
            return tuple(b for b in acls if b not in gone), matched

        return self._doc.update(change)
