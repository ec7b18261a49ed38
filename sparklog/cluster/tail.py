"""A cluster broker's tail on object storage, committed in etcd: commit and fence in one.

Keys (under the cluster prefix, ``Coordination.key``)::

    tail/<tail key>/<partition>/epoch         "00000000007/<token>": the claim that may commit
                                              (its leader epoch and a token of its own)
    tail/<tail key>/<partition>/c/<next>      a committed chunk (``TailEntry`` JSON), keyed by
                                              the offset after its last record (20 digits)

Who writes what, under which epoch:
- ``claim`` (a take-over at leader epoch E, before anything else touches the partition):
  one transaction that, if the epoch key holds an epoch not above E (or is absent), sets
  it to E and a new token and reads every chunk. The token fences an earlier claim of the
  same epoch too: a broker that lost its etcd lease and takes the same assignment over
  again must not have a round of its earlier tail, still in flight, land after the claim
  read the tail. From then on no broker with an older epoch can commit a chunk
  of the partition, and the new leader holds exactly the committed tail: no round of the
  old leader lands between the two.
- ``commit`` (a round): one transaction per at most ``TXN_OPS`` partitions that compares
  each partition's epoch key with the claim the chunks were cut under (``TailEntry.claim``)
  and puts the round's chunks. It is all or nothing: a failed compare commits none, the
  refused partitions are found from the failure branch's reads, and the round is
  committed again without them.
  This transaction is the acknowledgement's commit *and* its fence: it replaces the
  local log's fsync plus leadership read. Putting a chunk again (a retry whose first answer
  was lost) puts the same key, so retries are safe.
- ``drop`` (after a seal, by the leader): deletes the chunks the sealed segments hold,
  compared with the leader's claim.
- the controller's ``survey`` reads every chunk, to collect rounds nobody references
  (``sparklog.storage.tail.gc``) and to find the tail keys of deleted topics, which
  ``forget`` deletes (as the broker that deletes a topic does at once).

``<tail key>`` is ``<topic>@<topic id>`` (``sparklog.storage.tail.tail_key``): a topic
created again under a deleted one's name never meets the old keys.

etcd limits a transaction to 128 operations by default (``--max-txn-ops``): a round with
more partitions is committed in several transactions, each fenced on its own.

Threads: the etcd calls run on the tail's own event loop thread with its own client (as
``EpochFence``: a round must never wait for the broker's loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import aetcd

from sparklog.cluster.coordination import TXN_OPS, Coordination
from sparklog.cluster.etcd import EtcdSettings
from sparklog.errors import CoordinationError, LeaseLostError, NotLeaderError, SparkLogError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem
from sparklog.storage.tail.objects import Claimed, TailEntry

TopicPartition = tuple[str, int]
_CALL_TIMEOUT_S = 10.0


def _claim_value(epoch: int, token: str) -> bytes:
    """The epoch key's value: the claim's leader epoch (11 digits) and its token."""
    return f"{epoch:011d}/{token}".encode()


def _epoch_of(value: bytes) -> int:
    return int(value.split(b"/", 1)[0])


class EtcdTail:
    """The committer of a cluster broker's rounds (module docstring)."""

    ordered = False

    def __init__(
        self, etcd: EtcdSettings, cluster: str, node_id: int, fs: FileSystem, root: str
    ) -> None:
        self.fs = fs
        self.root = root
        self.node_id = node_id
        self.writer = names.wal_writer(node_id)
        self.coord = Coordination(etcd, cluster=cluster)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name=f"sparklog-tail-{node_id}", daemon=True
        )
        self._thread.start()
        self._seq = 0
        self._seq_lock = threading.Lock()
        self.transactions = 0

    def _run(self, coro: Any) -> Any:
        """``coro`` on the tail's loop; ``CoordinationError`` if it does not end in time
        (it is cancelled: a late commit or drop must not land after the caller gave up)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(_CALL_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise CoordinationError(
                f"etcd did not answer a tail call within {_CALL_TIMEOUT_S:.0f} s"
            ) from None

    def _epoch_key(self, topic: str, partition: int) -> bytes:
        return self.coord.key("tail", topic, partition, "epoch")

    def _chunk_prefix(self, topic: str, partition: int) -> bytes:
        return self.coord.key("tail", topic, partition, "c") + b"/"

    def _chunk_key(self, e: TailEntry) -> bytes:
        return self._chunk_prefix(e.topic, e.partition) + f"{e.next:020d}".encode()

    # ------------------------------------------------------------------ the committer

    def object_path(self, seq: int) -> str:
        return f"{names.WAL_DIR}/{self.writer}/{names.wal_object(seq)}"

    def next_seq(self) -> int:
        """Microseconds since the epoch, and above the last: unique across this node's
        restarts (a node id is registered by one process at a time)."""
        with self._seq_lock:
            self._seq = max(self._seq + 1, time.time_ns() // 1000)
            return self._seq

    def upload(self, seq: int, data: bytes) -> str:
        rel = self.object_path(seq)
        if not self.fs.create_exclusive(self.fs.join(self.root, rel), data):
            raise SparkLogError(f"{rel}: a tail round of that number exists; cut again")
        return rel

    def commit(self, seq: int, entries: list[TailEntry]) -> dict[TopicPartition, SparkLogError]:
        by_tp: dict[TopicPartition, list[TailEntry]] = defaultdict(list)
        for e in entries:
            by_tp[(e.topic, e.partition)].append(e)
        refused: dict[TopicPartition, SparkLogError] = {}
        tps = list(by_tp)
        group: list[TopicPartition] = []
        ops = 0
        for tp in tps:
            if group and ops + len(by_tp[tp]) > TXN_OPS:
                refused |= self._run(self._commit_group(group, by_tp))
                group, ops = [], 0
            group.append(tp)
            ops += len(by_tp[tp])
        if group:
            refused |= self._run(self._commit_group(group, by_tp))
        return refused

    async def _commit_group(
        self, group: list[TopicPartition], by_tp: dict[TopicPartition, list[TailEntry]]
    ) -> dict[TopicPartition, SparkLogError]:
        epochs = {tp: by_tp[tp][0].epoch for tp in group}
        claims = {tp: _claim_value(by_tp[tp][0].epoch, by_tp[tp][0].claim) for tp in group}
        keys = {tp: self._epoch_key(*tp) for tp in group}

        async def txn(c: aetcd.Client) -> Any:
            return await c.transaction(
                compare=[c.transactions.value(keys[tp]) == claims[tp] for tp in group],
                success=[
                    c.transactions.put(self._chunk_key(e), e.to_json())
                    for tp in group
                    for e in by_tp[tp]
                ],
                failure=[c.transactions.get(keys[tp]) for tp in group],
            )

        ok, resp = await self.coord.call("a tail round commit", txn)
        self.transactions += 1
        if ok:
            return {}
        refused: dict[TopicPartition, SparkLogError] = {}
        for tp, got in zip(group, resp, strict=True):
            now = bytes(got[0][0]) if got else None
            if now != claims[tp]:
                refused[tp] = NotLeaderError(
                    f"{tp[0]}-{tp[1]}: the tail claim of leader epoch {epochs[tp]} fenced in "
                    f"etcd (now {'unclaimed' if now is None else f'epoch {_epoch_of(now)}'})"
                )
        if not refused:  # a claim never comes back: each has a token of its own
            raise SparkLogError("a tail round commit failed with every claim in place")
        return refused

    # ------------------------------------------------------------------ take-over, drop

    def claim(self, topic: str, partition: int, epoch: int) -> Claimed:
        """Fence every earlier claim of the partition (of an older epoch, or of this one by
        an earlier take-over) and read its committed tail (module docstring);
        ``LeaseLostError`` if a newer epoch claimed it already."""
        token = uuid.uuid4().hex
        entries = self._run(self._claim(topic, partition, epoch, token))
        return Claimed(list(entries), token)

    async def _claim(self, topic: str, partition: int, epoch: int, token: str) -> list[TailEntry]:
        key = self._epoch_key(topic, partition)
        prefix = self._chunk_prefix(topic, partition)
        end = prefix[:-1] + b"0"  # the key after every "c/..." key ("/" + 1)
        for _ in range(20):
            current = await self.coord.get(key)
            now = _epoch_of(current) if current is not None else None
            if now is not None and now > epoch:
                raise LeaseLostError(
                    f"{topic}-{partition}: leader epoch {now} claimed the tail before {epoch}"
                )

            async def txn(c: aetcd.Client, current: bytes | None = current) -> Any:
                cmp = (
                    c.transactions.create(key) == 0
                    if current is None
                    else c.transactions.value(key) == current
                )
                return await c.transaction(
                    compare=[cmp],
                    success=[
                        c.transactions.put(key, _claim_value(epoch, token)),
                        c.transactions.get(prefix, range_end=end),
                    ],
                    failure=[],
                )

            ok, resp = await self.coord.call("a tail claim", txn)
            if ok:
                return [TailEntry.from_json(bytes(v)) for v, _meta in resp[1]]
        raise LeaseLostError(f"{topic}-{partition}: the tail claim kept racing")

    def drop(self, topic: str, partition: int, epoch: int, claim: str, through: int) -> bool:
        """Delete the chunks ending at or below offset ``through`` (sealed), if the
        partition's tail is still under ``claim`` of ``epoch``; False if it is not."""
        return bool(self._run(self._drop(topic, partition, _claim_value(epoch, claim), through)))

    async def _drop(self, topic: str, partition: int, claim: bytes, through: int) -> bool:
        key = self._epoch_key(topic, partition)
        prefix = self._chunk_prefix(topic, partition)
        end = prefix + f"{through + 1:020d}".encode()

        async def txn(c: aetcd.Client) -> Any:
            return await c.transaction(
                compare=[c.transactions.value(key) == claim],
                success=[c.transactions.delete(prefix, range_end=end)],
                failure=[],
            )

        ok, _ = await self.coord.call("a tail drop", txn)
        return bool(ok)

    def survey(self) -> tuple[set[str], set[str]]:
        """One read of every tail key: the objects some committed chunk names (the
        controller's round collection) and the tail keys present (``topic_keys``)."""
        start = self.coord.key("tail") + b"/"
        found = self._run(self.coord.get_prefix(start))
        objects: set[str] = set()
        keys: set[str] = set()
        for k, v in found.items():
            keys.add(k[len(start) :].split(b"/", 1)[0].decode())
            if b"/c/" in k:
                objects.add(json.loads(v)["object"])
        return objects, keys

    def referenced_objects(self) -> set[str]:
        """Every object some committed chunk names (``survey``)."""
        return self.survey()[0]

    def topic_keys(self) -> set[str]:
        return self.survey()[1]

    def forget(self, topic: str) -> None:
        """Delete every key of the tail key ``topic`` (a deleted topic's): a round still
        committing to it is refused (its claim is gone), a later claim starts empty."""
        self._run(
            self.coord.call(
                "a tail cleanup",
                lambda c: c.delete_prefix(self.coord.key("tail", topic) + b"/"),
            )
        )

    def close(self) -> None:
        try:
            self._run(self.coord.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
