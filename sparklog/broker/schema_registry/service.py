"""The broker's Schema Registry: state from ``_schemas``, changes written by one broker.

Who writes what (docs/schemas.md):

- The registry's only durable state is the compacted topic ``_schemas`` (one partition,
  ``sparklog.schemas.registry`` gives its records). Embedded mode: the broker writes it.
  Cluster mode: only the leader of ``_schemas``-0, at its leader epoch, may append (the
  storage layer fences an older epoch's appends, as for any partition), so only it assigns
  ids and versions; every other broker forwards changes to it over HTTP (its registry
  address is in its etcd registration, protocol ``SCHEMA_REGISTRY``) and answers reads
  itself.
- A change runs under one lock: read the topic to its end (a new leader first catches up
  on what the old one wrote), compute the change on the state, append its records, wait
  until they are durable, answer. If the append fails, the state is rebuilt from the log,
  so it never holds a change the log does not.
- Reads: before each answer the broker applies what was appended since its last read (the
  leader from its own log; another broker from the shared storage, as any reader does), so
  a client that registered through one broker finds the schema on any other, and a new
  leader answers with what its predecessor wrote.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from sparklog.errors import RegistryUnavailableError, SparkLogError
from sparklog.schemas.registry import SCHEMAS_TOPIC, Record, RegistryState

if TYPE_CHECKING:
    from sparklog.broker.membership import ClusterMember
    from sparklog.broker.partitions import PartitionManager

log = logging.getLogger(__name__)
T = TypeVar("T")
#: the protocol name of a broker's registry address in its cluster registration
REGISTRY_ENDPOINT = "SCHEMA_REGISTRY"


class SchemaRegistryService:
    """The registry of one broker (see the module docstring)."""

    def __init__(
        self, manager: PartitionManager, node_id: int, member: ClusterMember | None = None
    ) -> None:
        self.manager = manager
        self.node_id = node_id
        self.member = member
        self.state = RegistryState()
        #: where this broker serves the REST API (``http[s]://host:port``), once it does:
        #: DescribeConfigs of the broker reports it as ``confluent.schema.registry.url``
        self.url: str | None = None
        self._next = 0  # the next offset of _schemas to apply
        self._lock = asyncio.Lock()
        #: the leader epoch at which an append failed: no more changes at it (``change``)
        self._failed_epoch: int | None = None

    def ensure_topic(self) -> None:
        self.manager.ensure_internal_topic(SCHEMAS_TOPIC, 1)

    # ------------------------------------------------------------------ reading

    def leads(self) -> bool:
        """Whether this broker may write ``_schemas``: it leads partition 0 (embedded:
        always), at an epoch at which no append of its failed (``change``)."""
        handle = self.manager.handles.get((SCHEMAS_TOPIC, 0))
        if self.member is None:
            return handle is None or handle.leader_epoch != self._failed_epoch
        return handle is not None and handle.leader_epoch != self._failed_epoch

    def failed_here(self) -> bool:
        """Whether this broker leads ``_schemas``-0 at an epoch at which an append failed
        (``change``): it writes no more until it leads at a newer one, or restarts."""
        handle = self.manager.handles.get((SCHEMAS_TOPIC, 0))
        return handle is not None and handle.leader_epoch == self._failed_epoch

    def named_leader(self) -> bool:
        """Cluster mode: whether the cluster view names this broker the leader of
        ``_schemas``-0 (it may not have taken it over yet, or not write at its epoch)."""
        return (
            self.member is not None and self.member.leader_of(SCHEMAS_TOPIC, 0)[0] == self.node_id
        )

    async def becoming_leader(self, wait_s: float = 5.0) -> bool:
        """Whether this broker leads ``_schemas``-0 within ``wait_s``, when the cluster view
        already says it does (it is taking the partition over): rather than forward a
        change to itself."""
        if not self.named_leader():
            return False
        deadline = asyncio.get_running_loop().time() + wait_s
        while not self.leads():
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def leader_url(self) -> str | None:
        """Cluster mode: the registry address of the broker leading ``_schemas``-0."""
        if self.member is None:
            return None
        leader, _epoch = self.member.leader_of(SCHEMAS_TOPIC, 0)
        info = self.member.view.brokers.get(leader)
        if info is None:
            return None
        for protocol, host, port in info.endpoints:
            if protocol == REGISTRY_ENDPOINT:
                return f"{host}:{port}"
        return None

    def refresh(self) -> RegistryState:
        """Apply what ``_schemas`` holds beyond what was applied; the state."""
        handle = self.manager.handles.get((SCHEMAS_TOPIC, 0))
        if handle is not None:
            view = handle.log.view()
        else:
            if self.member is None:  # embedded: open (and lead) the partition
                view = self.manager.partition(SCHEMAS_TOPIC, 0).log.view()
            else:
                view = self.manager.follower_view(SCHEMAS_TOPIC, 0)
        if self._next < view.log_start_offset:  # compacted below what was applied: replay
            self.state, self._next = RegistryState(), view.log_start_offset
        if self._next < view.high_watermark:
            for batch in view.batches(self._next, columns=["offset", "key", "value"]):
                keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
                self.state.apply_all(zip(keys, values, strict=True))
            self._next = view.high_watermark
        return self.state

    def read(self, query: Callable[[RegistryState], T]) -> T:
        """Answer a read from the state (another broker's appends read first)."""
        return query(self.refresh())

    # ------------------------------------------------------------------ writing

    async def change(self, compute: Callable[[RegistryState], tuple[T, list[Record]]]) -> T:
        """Run a change on the leader (the caller forwards it when ``leads()`` is false)."""
        async with self._lock:
            if not self.leads():
                raise RegistryUnavailableError("this broker no longer leads _schemas")
            self.refresh()
            result, records = compute(self.state)
            if not records:
                return result
            epoch = self.manager.partition(SCHEMAS_TOPIC, 0).leader_epoch
            try:
                await self._append(records)
            except BaseException:
                # The records may still become visible: a broker that takes the partition
                # over keeps what was appended before it froze the segment, acknowledged
                # or not. A change computed without them could give their ids again, so
                # this broker writes no more at this epoch; the next leader (this one at a
                # newer epoch, or another) reads them before its first change.
                self._failed_epoch = epoch
                log.warning(
                    "a registry change was not written (the log may still hold it): "
                    "no more changes at leader epoch %d; reading _schemas again",
                    epoch,
                )
                self.state, self._next = RegistryState(), 0
                try:
                    self.refresh()
                except SparkLogError:
                    log.exception("cannot read _schemas")
                raise
            return result

    async def _append(self, records: list[Record]) -> None:
        handle = self.manager.partition(SCHEMAS_TOPIC, 0)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([k for k, _ in records], pa.binary()),
                pa.array([v for _, v in records], pa.binary()),
            ],
            names=["key", "value"],
        )
        result = handle.log.append(batch, durable=False)
        await self.manager.wait_durable(handle, result.last_offset + 1)
        self._next = result.last_offset + 1
