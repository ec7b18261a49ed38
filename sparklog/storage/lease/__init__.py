"""The lease seam: who may write what, and under which epoch.

A ``Lease`` is held by one holder at a time under a name, and carries an *epoch*: a number
that grows with every acquisition of the name, so that whatever a holder writes can be
fenced once a newer holder exists (the epoch is the fencing token; a lease alone does not
give mutual exclusion across a paused process). ``renew`` keeps it (or raises
``LeaseLostError``), ``lost`` says whether it was lost, ``release`` gives it up.

Names in use: ``DATA_DIR`` (the one writer of a storage root: a broker in embedded mode, or
an offline tool changing topics) and ``compaction_lease(topic)`` (one compaction job per
topic). ``LeaseStore.acquire`` raises ``DataDirLockedError`` / ``CompactionRunningError``
(both ``LeaseHeldError``) when another holder has them, naming it.

One module per backend, like the filesystem seam: ``local`` (a ``flock`` per name on the
local disk: the kernel drops it when the holder dies, so it is never lost while the holder
lives). Cluster mode adds a backend on etcd. Every backend runs the same contract tests
(tests/storage/test_lease_contract.py). ``Storage.leases`` (``sparklog.storage.store``)
picks the backend of a storage root.
"""

from __future__ import annotations

import abc
from types import TracebackType

from sparklog.errors import CompactionRunningError, DataDirLockedError, LeaseHeldError
from sparklog.storage import names

DATA_DIR = "data-dir"
COMPACTION = "compaction"


def compaction_lease(topic: str) -> str:
    """The name of the lease a compaction job holds on ``topic``."""
    return f"{COMPACTION}/{names.validate_topic_name(topic)}"


def held_error(name: str, holder: str, where: str) -> LeaseHeldError:
    """The error for a lease someone else holds (the kind depends on the name)."""
    if name == DATA_DIR:
        return DataDirLockedError(
            f"{where} is locked by another process ({holder or '?'}): one writer per data "
            "dir; stop that process first, or give another data dir"
        )
    kind, _, topic = name.partition("/")
    if kind == COMPACTION:
        return CompactionRunningError(
            f"topic {topic}: another compaction job holds {where} ({holder or '?'})"
        )
    return LeaseHeldError(f"lease {name!r} ({where}) is held by {holder or '?'}")


class Lease(abc.ABC):
    """One held lease (see the module docstring). Use as a context manager."""

    name: str
    holder: str
    epoch: int

    @abc.abstractmethod
    def renew(self) -> None:
        """Extend the lease; LeaseLostError if it was lost or released."""

    @property
    @abc.abstractmethod
    def lost(self) -> bool:
        """True once the lease is lost or released: its epoch must not write any more."""

    @abc.abstractmethod
    def release(self) -> None:
        """Give the lease up (idempotent)."""

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class LeaseStore(abc.ABC):
    """Where leases are held (one backend per module)."""

    @abc.abstractmethod
    def acquire(self, name: str, holder: str) -> Lease:
        """Take lease ``name`` for ``holder`` (a description: host, pid, role) with a new
        epoch above every earlier one of the name; LeaseHeldError if another holds it."""
