"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
WriteTxnMarkers, DescribeTransactions, ListTransactions, DescribeProducers: the
transaction protocol over
``sparklog.broker.coordinators.transactions`` (the coordinator) and
``sparklog.broker.coordinators.group_offsets``.

AddPartitionsToTxn is served up to v3, the client versions (v4+ batch the brokers'
verification of KIP-890, which sparklog does inside the broker). A partition that does not
exist gets UNKNOWN_TOPIC_OR_PARTITION and the others of the request
OPERATION_NOT_ATTEMPTED, as in Kafka: nothing is added.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.coordinators.group_offsets import OFFSETS_TOPIC, CommitEntry, offsets_partition
from sparklog.broker.coordinators.transactions import STATES, describe_entry, write_local_marker
from sparklog.broker.errors import error_code
from sparklog.errors import (
    ClusterAuthorizationError,
    InvalidProducerEpochError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    SparkLogError,
    TopicsDeniedError,
)
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT


def _ms(value: Any) -> int:
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def _check_coordinator(ctx: RequestContext, tid: str) -> None:
    if not ctx.transactions.coordinates(tid):
        raise NotCoordinatorError(
            f"broker {ctx.node_id} does not coordinate transactional id {tid!r}"
        )


async def init_producer_id(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    pid = int(getattr(req, "producer_id", -1))
    epoch = int(getattr(req, "producer_epoch", -1))
    tid = req.transactional_id
    if tid is not None:
        try:
            ctx.require(Op.WRITE, RT.TRANSACTIONAL_ID, tid)
            _check_coordinator(ctx, tid)
            out["producer_id"], out["producer_epoch"] = await ctx.transactions.init_producer_id(
                tid, _ms(req.transaction_timeout), pid, epoch
            )
        except (SparkLogError, ValueError) as e:
            out["error_code"] = error_code(e)
        return out
    # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on
    # some topic (CVE-2018-17196: no producer id for whoever may write nowhere)
    if not (ctx.allowed(Op.IDEMPOTENT_WRITE, RT.CLUSTER) or ctx.allowed_any(Op.WRITE, RT.TOPIC)):
        out["error_code"] = error_code(
            ClusterAuthorizationError(
                f"{ctx.principal} may not IDEMPOTENT_WRITE the cluster nor WRITE any topic"
            )
        )
        return out
    if pid >= 0 and 0 <= epoch < 32767:
        # KIP-360: an idempotent producer that hit an error asks for a bumped epoch
        out.update(producer_id=pid, producer_epoch=epoch + 1)
        return out
    out["producer_id"] = (
        await ctx.cluster.next_producer_id()
        if ctx.cluster is not None
        else ctx.manager.producer_ids.next_id()
    )
    out["producer_epoch"] = 0
    return out


def _not_attempted(tid: str, tp: tuple[str, int]) -> OperationNotAttemptedError:
    return OperationNotAttemptedError(
        f"transactional id {tid!r}: {tp[0]}-{tp[1]} not added, another partition failed"
    )


async def add_partitions_to_txn(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    tid = req.v3_and_below_transactional_id
    wanted = [(t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions]
    codes: dict[tuple[str, int], ErrorCode] = {}
    try:
        ctx.require(Op.WRITE, RT.TRANSACTIONAL_ID, tid)
        denied = {tp for tp in wanted if not ctx.allowed(Op.WRITE, RT.TOPIC, tp[0])}
        if denied:
            raise TopicsDeniedError(denied)
        _check_coordinator(ctx, tid)
        missing = ctx.transactions.check_partitions(wanted)
        if missing:
            codes = {tp: error_code(missing.get(tp) or _not_attempted(tid, tp)) for tp in wanted}
        else:
            await ctx.transactions.add_partitions(
                tid, int(req.v3_and_below_producer_id), int(req.v3_and_below_producer_epoch), wanted
            )
    except TopicsDeniedError as e:
        codes = {tp: error_code(e if tp in e.denied else _not_attempted(tid, tp)) for tp in wanted}
    except (SparkLogError, ValueError) as e:
        codes = dict.fromkeys(wanted, error_code(e))
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p in wanted:
        code = codes.get((t, p), ErrorCode.none)
        topics.setdefault(t, []).append({"partition_index": p, "partition_error_code": code})
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": t, "results_by_partition": rs} for t, rs in topics.items()
        ],
    }


async def add_offsets_to_txn(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        ctx.require(Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id)
        ctx.require(Op.READ, RT.GROUP, req.group_id)
        _check_coordinator(ctx, req.transactional_id)
        await ctx.transactions.add_partitions(
            req.transactional_id,
            int(req.producer_id),
            int(req.producer_epoch),
            [(OFFSETS_TOPIC, offsets_partition(req.group_id))],
        )
        code = ErrorCode.none
    except (SparkLogError, ValueError) as e:
        code = error_code(e)
    return {"throttle_time": 0, "error_code": code}


async def end_txn(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    try:
        ctx.require(Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id)
        _check_coordinator(ctx, req.transactional_id)
        await ctx.transactions.end_txn(
            req.transactional_id,
            int(req.producer_id),
            int(req.producer_epoch),
            bool(req.committed),
        )
        code = ErrorCode.none
    except (SparkLogError, ValueError) as e:
        code = error_code(e)
    return {"throttle_time": 0, "error_code": code}


async def txn_offset_commit(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    entries = [
        CommitEntry(
            t.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
        )
        for t in req.topics
        for p in t.partitions
    ]
    try:
        ctx.require(Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id)
        ctx.require(Op.READ, RT.GROUP, req.group_id)
        for e_ in entries:
            ctx.require(Op.READ, RT.TOPIC, e_.topic)
        ctx.check_coordinator(req.group_id)
        try:
            ctx.transactions.check_epoch(
                req.transactional_id, int(req.producer_id), int(req.producer_epoch)
            )
        except ProducerFencedError as e:  # Kafka 4.3.1 answers 47 here, in every version
            raise InvalidProducerEpochError(f"group {req.group_id!r}: {e}") from e
        await ctx.offsets.txn_commit(
            req.group_id, int(req.producer_id), int(req.producer_epoch), entries
        )
        code = ErrorCode.none
    except (SparkLogError, ValueError) as e:
        code = error_code(e)
    topics: dict[str, list[dict[str, Any]]] = {}
    for e_ in entries:
        topics.setdefault(e_.topic, []).append(
            {"partition_index": e_.partition, "error_code": code}
        )
    return {
        "throttle_time": 0,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


async def write_txn_markers(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """Markers a transaction coordinator sends to this broker for the partitions it leads:
    brokers only (CLUSTER_ACTION; CVE-2018-1288)."""
    markers = []
    allowed = ctx.allowed(Op.CLUSTER_ACTION, RT.CLUSTER)
    for m in req.markers:
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                try:
                    if not allowed:
                        raise ClusterAuthorizationError(f"{ctx.principal} may not write markers")
                    ctx.manager.led(t.name, int(p))
                    await write_local_marker(
                        ctx.manager,
                        ctx.offsets,
                        t.name,
                        int(p),
                        int(m.producer_id),
                        int(m.producer_epoch),
                        bool(m.transaction_result),
                        int(m.coordinator_epoch),
                    )
                    code = ErrorCode.none
                except (SparkLogError, ValueError) as e:
                    code = error_code(e)
                parts.append({"partition_index": int(p), "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
        markers.append({"producer_id": int(m.producer_id), "topics": topics})
    return {"markers": markers}


async def describe_transactions(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    out = []
    for tid in req.transactional_ids:
        try:
            ctx.require(Op.DESCRIBE, RT.TRANSACTIONAL_ID, tid)
            _check_coordinator(ctx, tid)
            out.append(
                {"error_code": ErrorCode.none, **describe_entry(ctx.transactions.describe(tid))}
            )
        except SparkLogError as e:
            out.append(
                {
                    "error_code": error_code(e),
                    "transactional_id": tid,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
    return {"throttle_time": 0, "transaction_states": out}


async def list_transactions(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    states = list(getattr(req, "state_filters", ()) or ())
    pids = {int(p) for p in getattr(req, "producer_id_filters", ()) or ()}
    min_duration = int(getattr(req, "duration_filter", -1))
    now = int(time.time() * 1000)
    rows = []
    for tid, meta in sorted(ctx.transactions.txns.items()):
        if not ctx.transactions.coordinates(tid):
            continue
        if not ctx.allowed(Op.DESCRIBE, RT.TRANSACTIONAL_ID, tid):
            continue
        if states and meta.state not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if min_duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration):
            continue
        rows.append(
            {
                "transactional_id": tid,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": [s for s in states if s not in STATES],
        "transaction_states": rows,
    }


async def describe_producers(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """The producers each led partition knows, with their open transaction's first offset
    (what ``kafka-transactions describe-producers`` and ``find-hanging`` read)."""
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partition_indexes:
            entry: dict[str, Any] = {
                "partition_index": int(p),
                "error_code": ErrorCode.none,
                "error_message": None,
                "active_producers": [],
            }
            try:
                ctx.require(Op.READ, RT.TOPIC, t.name)
                handle = ctx.manager.led(t.name, int(p))
                entry["active_producers"] = [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "last_sequence": seq,
                        "last_timestamp": -1,
                        "coordinator_epoch": -1,
                        "current_txn_start_offset": start,
                    }
                    for pid, epoch, seq, start in handle.log.producers()
                ]
            except (SparkLogError, ValueError) as e:
                entry.update(error_code=error_code(e), error_message=str(e))
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
