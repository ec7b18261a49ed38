"""Fetch: read stored Arrow batches up to the high watermark and encode them as Kafka
record batches, compressed as the topic's ``compression.type`` says (``producer``: each in
the codec it was produced with); long-poll (``max_wait``/``min_bytes``) woken by group
commits.

Cluster mode: a broker that does not lead a partition serves its fetches from storage as a
follower (KIP-392), up to the leader's high watermark (the checkpoint of the manifest's
epoch); an offset past it is OFFSET_NOT_AVAILABLE (retriable: the follower's view may be a
moment behind), never OFFSET_OUT_OF_RANGE, which would make the client reset. A leader asked
by a client in another rack (``client.rack``, Fetch v11+) names a live replica in the
client's rack as its preferred read replica, and returns no records; only a replica that
Metadata lists, so never on a single local copy (``sparklog.broker.replicas``), and never
on object storage, where only the leader holds the unsealed tail. A client
may still fetch from any broker (it reads the same storage). Followers poll storage
for new records while a fetch waits (``FOLLOWER_POLL_S``).

Fetch sessions (KIP-227) are not kept: every response says session 0, which tells clients
to send full fetch requests. ``max_bytes`` and ``partition_max_bytes`` limit the bytes
returned; as Kafka does, only the first partition with data may go past them, by its
first record batch, so that a record larger than the limits is still delivered. Records
are read up to the Arrow bytes left, and a later partition's encoded batches that still
do not fit are read again smaller, or not returned.

Transactions: every response carries the last stable offset (``last_stable_offset``). A
``read_committed`` fetch (``isolation_level`` 1) reads up to it, not to the high
watermark, and lists the aborted transactions (producer id, first offset) that overlap
what it returns; the client drops their records and every control batch. A follower reads
both from the storage's transaction index (``sparklog.storage.txnindex``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.broker.partitions import PartitionHandle
from sparklog.broker.replicas import reported
from sparklog.broker.wire_cache import CachedBatches, WireCache
from sparklog.errors import (
    NotLeaderError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    SparkLogError,
    TopicAuthorizationError,
)
from sparklog.kafka.records import CODECS, encode_batches
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT
from sparklog.storage.reader import LogView

FOLLOWER_POLL_S = 0.05
#: stands for "a partition read as a follower" among the handles a fetch waits on
FOLLOWER = object()


def _preferred_replica(ctx: RequestContext, topic: str, partition: int, rack: str) -> int:
    """KIP-392: a live replica in the client's rack, when this leader is not in it. Only
    a replica Metadata lists (``broker.replicas``): Kafka's Java consumer follows no other,
    and would come back here for ever. On a single local copy that is the leader alone,
    so no other broker is named (every broker would read the same one copy anyway). On
    object storage neither: only the leader holds the tail (other brokers read the
    bucket's sealed segments), so a follower would serve the client stale records."""
    cluster = ctx.cluster
    if cluster is None or not rack or cluster.rack == rack or ctx.manager.tail is not None:
        return -1
    a = cluster.view.assignments.get((topic, partition))
    redundant = ctx.manager.storage.fs.redundant
    for node in reported(a.leader, a.replicas, redundant=redundant) if a is not None else ():
        b = cluster.view.brokers.get(node)
        if b is not None and node != ctx.node_id and b.rack == rack:
            return node
    return -1


def _read_partition(
    ctx: RequestContext,
    topic: str,
    p: Any,
    budget: int,
    first: bool,
    rack: str = "",
    committed: bool = False,
    replica: bool = False,
) -> tuple[dict[str, Any], PartitionHandle | object | None, int]:
    base = {
        "partition_index": p.partition,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        # empty, never null, also with an error: librdkafka cannot parse a null record set
        # (Fetch v12) and would never see OFFSET_OUT_OF_RANGE to apply auto.offset.reset
        "records": b"",
    }
    waiter: PartitionHandle | object
    try:
        if replica:  # a follower's fetch: only brokers (CVE-2018-1288)
            if not ctx.allowed(Op.CLUSTER_ACTION, RT.CLUSTER):
                raise TopicAuthorizationError(f"{ctx.principal} may not fetch as a replica")
        else:
            ctx.require(Op.READ, RT.TOPIC, topic)
        meta = ctx.manager.topic(topic)
        try:
            current = int(getattr(p, "current_leader_epoch", -1))
            handle = ctx.manager.led(topic, p.partition, current)
        except NotLeaderError:
            if ctx.cluster is None:
                raise
            view, waiter = ctx.manager.follower_view(topic, p.partition), FOLLOWER
        else:
            preferred = _preferred_replica(ctx, topic, p.partition, rack)
            if preferred >= 0:
                return (
                    {**base, "error_code": ErrorCode.none, "preferred_read_replica": preferred},
                    None,
                    0,
                )
            view, waiter = handle.log.view(), handle
    except (SparkLogError, ValueError) as e:
        return {**base, "error_code": error_code(e)}, None, 0
    hw, start, lso = view.high_watermark, view.log_start_offset, view.last_stable_offset
    entry = {
        **base,
        "error_code": ErrorCode.none,
        "high_watermark": hw,
        "last_stable_offset": lso,
        "log_start_offset": start,
    }
    if committed:
        entry["aborted_transactions"] = []
    offset = int(p.fetch_offset)
    end = lso if committed else hw
    limit = min(int(p.partition_max_bytes), budget)
    codec = CODECS.get(meta.config.compression_type, 0)
    try:
        if waiter is FOLLOWER and offset > hw >= start:
            raise OffsetNotAvailableError(
                f"{topic}-{p.partition}: offset {offset} is past the high watermark {hw} "
                "this follower has read so far"
            )
        if offset < start or offset > hw:
            raise OffsetOutOfRangeError(
                f"{topic}-{p.partition}: offset {offset} is outside [{start}, {hw}]"
            )
        if offset >= end or (limit <= 0 and not first):
            return {**entry, "records": b""}, waiter, 0
        wire = ctx.manager.wire
        if waiter is FOLLOWER or not wire.enabled or meta.config.compact:
            data, after, count = _encoded(view, offset, end, limit, first, codec)
        else:
            assert isinstance(waiter, PartitionHandle)
            data, after, count = _served(wire, waiter.wire, view, offset, end, limit, first, codec)
    except SparkLogError as e:
        return {**entry, "error_code": error_code(e)}, waiter, 0
    if committed and count:
        entry["aborted_transactions"] = [
            {"producer_id": a.producer_id, "first_offset": a.first_offset}
            for a in view.txn.aborted_between(offset, after)
        ]
    metrics = ctx.services.metrics
    if metrics is not None and count:
        metrics.fetched(topic, count, len(data))
    return {**entry, "records": data}, waiter, len(data)


def _encoded(
    view: LogView, offset: int, end: int, limit: int, first: bool, codec: int
) -> tuple[bytes, int, int]:
    """The stored records from ``offset`` (below ``end``, about ``limit`` bytes) encoded as
    Kafka record batches: (bytes, the offset after the last record, how many records)."""
    batches = view.read(offset, max_bytes=max(limit, 1), end_offset=end, at_least_one=first)
    data = encode_batches(batches, codec=codec)
    if not first and len(data) > limit:  # encoded bigger than the Arrow bytes: shrink
        batches = view.read(
            offset, max_bytes=limit * limit // len(data), end_offset=end, at_least_one=False
        )
        data = encode_batches(batches, codec=codec)
        if len(data) > limit:
            batches, data = [], b""
    if not batches:
        return data, offset, 0
    last = batches[-1].column("offset")[batches[-1].num_rows - 1].as_py()
    return data, last + 1, sum(b.num_rows for b in batches)


def _served(
    wire: WireCache,
    part: CachedBatches,
    view: LogView,
    offset: int,
    end: int,
    limit: int,
    first: bool,
    codec: int,
) -> tuple[bytes, int, int]:
    """``_encoded``'s answer, each batch the cache holds served as it was produced
    (``sparklog.broker.wire_cache``) and only the ranges it misses read from storage."""
    parts: list[bytes] = []
    size = count = 0
    at = offset
    while at < end and (size < limit or (first and not parts)):
        i = part.find(at)
        if i >= 0:
            got, after, n = wire.take(part, i, end, limit - size, first and not parts)
            if got:
                parts += got
                size += sum(len(b) for b in got)
                at, count = after, count + n
                continue
            if part.lasts[i] < end:  # the batch does not fit what is left of the budget
                break
            # it ends past ``end`` (not at a batch boundary: rare): the stored records to it
        nxt = part.next_base(at)
        stop = end if nxt is None else min(end, nxt)
        data, after, n = _encoded(view, at, stop, limit - size, first and not parts, codec)
        if not n:
            if stop < end and first and not parts:  # no records there at all: go past
                at = stop
                continue
            break
        parts.append(data)
        size += len(data)
        at, count = after, count + n
    return b"".join(parts), at, count


async def fetch(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    deadline = time.monotonic() + req.max_wait.total_seconds()
    min_bytes = max(int(req.min_bytes), 0)
    while True:
        budget = int(req.max_bytes) if int(req.max_bytes) > 0 else 2**31 - 1
        total = 0
        handles: list[PartitionHandle] = []
        follows = False
        responses = []
        rack = getattr(req, "rack_id", "") or ""
        committed = int(getattr(req, "isolation_level", 0)) == 1
        replica = int(getattr(req, "replica_id", -1)) >= 0
        for t in req.topics:
            parts = []
            for p in t.partitions:
                entry, waiter, size = _read_partition(
                    ctx, t.topic, p, budget, total == 0, rack, committed, replica
                )
                parts.append(entry)
                total += size
                budget -= size
                if isinstance(waiter, PartitionHandle):
                    handles.append(waiter)
                follows = follows or waiter is FOLLOWER
            responses.append({"topic": t.topic, "partitions": parts})
        remaining = deadline - time.monotonic()
        if total >= min_bytes or remaining <= 0 or not (handles or follows):
            break
        if follows:  # storage tells a follower nothing: look again shortly
            remaining = min(remaining, FOLLOWER_POLL_S)
        if handles:
            await ctx.manager.wait_for_data(handles, remaining)
        else:
            await asyncio.sleep(remaining)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": responses,
    }
