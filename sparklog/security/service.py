"""The broker's security state: stored users and ACLs, the authorizer built from them.

Whether a request is allowed is ``allowed(principal, host, operation, resource type,
name)``: always true while the authorizer is off (``[security] authorizer = false``, the
default: Kafka without an ``authorizer.class.name``). ``refresh`` (the broker's maintenance
tick) picks up users and ACLs other brokers or the offline tool committed; changes made
through this broker apply at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from sparklog.security.acls import AclBinding, AclFilter, AclOperation, Authorizer, ResourceType
from sparklog.security.config import SecurityConfig
from sparklog.security.store import AclStore, CredentialStore
from sparklog.storage import Storage


class SecurityService:
    """See the module docstring."""

    def __init__(self, config: SecurityConfig, storage: Storage) -> None:
        self.config = config
        self.credentials = CredentialStore(storage)
        self.acls = AclStore(storage)
        self.enabled = config.authorizer
        self._lock = threading.Lock()
        self.authorizer = self._build()

    def _build(self) -> Authorizer:
        return Authorizer(
            self.acls.bindings(),
            super_users=self.config.super_users,
            allow_everyone_if_no_acl_found=self.config.allow_everyone_if_no_acl_found,
        )

    def refresh(self) -> None:
        self.credentials.refresh()
        if self.acls.refresh():
            with self._lock:
                self.authorizer = self._build()

    def allowed(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        if not self.enabled:
            return True
        return self.authorizer.authorize(principal, host, op, rtype, name)

    def allowed_any(self, principal: str, host: str, op: AclOperation, rtype: ResourceType) -> bool:
        if not self.enabled:
            return True
        return self.authorizer.authorize_any(principal, host, op, rtype)

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (any stored SCRAM credential of the user, in
        constant time; an unknown user takes as long): HTTP basic auth of the registry."""
        from sparklog.security.scram import make_credential

        creds = self.credentials.users().get(user, {})
        cred = next(iter(creds.values()), None)
        if cred is None or not password:
            # the same work for an unknown user or an empty password (no credential has one)
            make_credential("SCRAM-SHA-256", password or "x", 4096).check_password("y")
            return False
        return cred.check_password(password)

    def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        self.acls.add(bindings)
        with self._lock:
            self.authorizer = self._build()

    def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        matched = self.acls.delete(filters)
        with self._lock:
            self.authorizer = self._build()
        return matched
