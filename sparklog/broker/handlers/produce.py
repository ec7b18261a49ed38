"""Produce: decode, check, append, then (acks != 0) wait for the group-commit fsync.

A transactional batch from a fenced epoch is INVALID_PRODUCER_EPOCH, never
PRODUCER_FENCED, in every version, as in Kafka: that is the answer clients treat as fatal.

Every partition of a request is appended before any fsync is awaited, so one request's
partitions share fsyncs with each other and with other requests. A partition that fails
gets its error code; the others are unaffected and nothing partial is ever written: a
batch is decoded and checked whole before its single append.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.broker.partitions import PartitionHandle
from sparklog.broker.schema_registry.validation import check_records
from sparklog.errors import (
    DuplicateSequenceError,
    InvalidBatchError,
    InvalidProducerEpochError,
    InvalidRecordsError,
    LeaseLostError,
    LogClosedError,
    NotLeaderError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordsRefusedError,
    RecordTooLargeError,
    SparkLogError,
    UnknownProducerError,
)
from sparklog.kafka.records import decode_batch, split_batches
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT

_SEQUENCE_ERRORS = (
    DuplicateSequenceError,
    OutOfOrderSequenceError,
    UnknownProducerError,
    InvalidProducerEpochError,
)
log = logging.getLogger(__name__)
_BACKGROUND: set[asyncio.Task[None]] = set()


def _background_done(task: asyncio.Task[None]) -> None:
    _BACKGROUND.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("acks=0 records not made durable: %s", task.exception())


def _partition_error(index: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


def _append_one(
    ctx: RequestContext,
    topic: str,
    index: int,
    records: bytes | None,
    transactional_id: str | None = None,
) -> tuple[dict[str, Any], PartitionHandle | None, int]:
    """Append one partition's data; returns (response entry, handle, next offset to await)."""
    manager = ctx.manager
    ctx.require(Op.WRITE, RT.TOPIC, topic)
    meta = ctx.auto_create(topic)
    handle = manager.partition(topic, index)
    if records is None:
        raise InvalidBatchError("no records")
    raw_batches = split_batches(records)
    if len(raw_batches) != 1:
        raise InvalidBatchError(f"expected one record batch, got {len(raw_batches)}")
    raw = raw_batches[0]
    if len(raw) > meta.config.max_message_bytes:
        raise RecordTooLargeError(
            f"{topic}-{index}: record batch of {len(raw)} bytes exceeds max.message.bytes "
            f"{meta.config.max_message_bytes}"
        )
    batch = decode_batch(raw, max_decompressed=manager.config.max_decompressed_batch_bytes)
    keys = batch.records.column("key")
    if meta.config.compact and keys.null_count:
        nulls = [i for i, valid in enumerate(keys.is_valid().to_pylist()) if not valid]
        why = "Compacted topic cannot accept message without key in topic partition"
        raise RecordsRefusedError(
            f"{topic}-{index}: compacted topic cannot accept a record without a key "
            f"(records {nulls[:10]}{'...' if len(nulls) > 10 else ''} of the batch)",
            [(i, f"{why} {topic}-{index}.") for i in nulls],
        )
    if meta.config.value_schema_validation or meta.config.key_schema_validation:
        _validate_schemas(ctx, topic, index, batch.records, meta.config)
    if batch.transactional:
        if transactional_id is None:
            raise InvalidBatchError("a transactional batch needs the request's transactional id")
        try:
            ctx.transactions.verify(
                transactional_id, batch.producer_id, batch.producer_epoch, (topic, index)
            )
        except ProducerFencedError as e:
            # Kafka's produce path answers a fenced epoch INVALID_PRODUCER_EPOCH, whatever
            # the coordinator said (AddPartitionsToTxnManager converts PRODUCER_FENCED):
            # clients take only that as fatal here, PRODUCER_FENCED as abortable
            raise InvalidProducerEpochError(f"{topic}-{index}: {e}") from e
    outcome = manager.append(handle, batch)
    metrics = ctx.services.metrics
    if metrics is not None and not outcome.duplicate:
        metrics.produced(topic, batch.count, len(raw))
    entry: dict[str, Any] = {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": outcome.base_offset,
        "log_append_time": outcome.log_append_time_ms if outcome.log_append_time_ms >= 0 else None,
        "log_start_offset": handle.log.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
    return entry, handle, outcome.base_offset + batch.count


def _validate_schemas(
    ctx: RequestContext, topic: str, index: int, records: Any, config: Any
) -> None:
    """Broker-side schema validation (``sparklog.broker.schema_registry.validation``)."""
    registry = ctx.services.registry
    if registry is None:
        raise InvalidRecordsError(f"{topic}-{index}: schema validation is on, but the broker "
                                  "has no schema registry")  # fmt: skip
    bad = check_records(registry, topic, records, config)
    if bad:
        first, why = bad[0]
        raise RecordsRefusedError(
            f"{topic}-{index}: {len(bad)} of {records.num_rows} records refused by schema "
            f"validation; record {first}: {why}",
            bad,
        )


def _not_durable_code(e: BaseException) -> ErrorCode:
    """The answer for records appended but never acknowledged. A leadership check that
    failed after the append (cluster mode: another broker leads now) is REQUEST_TIMED_OUT,
    not NOT_LEADER_OR_FOLLOWER: the records are in the file, and the new leader's recovery
    may include them. Kafka clients take NOT_LEADER_OR_FOLLOWER as "not persisted" and,
    should they bump their producer epoch, send such records again under new sequence
    numbers: written twice (bench/cluster.py found it). REQUEST_TIMED_OUT means "may or may
    not be written": the client retries with the same sequence numbers, and the new leader
    answers a batch it holds with its original offsets. A failed fsync is
    KAFKA_STORAGE_ERROR."""
    if isinstance(e, NotLeaderError | LogClosedError | LeaseLostError):
        return ErrorCode.request_timed_out
    if isinstance(e, SparkLogError):
        return error_code(e)
    return ErrorCode.kafka_storage_error


async def _confirmed(
    ctx: RequestContext, topic: str, index: int, e: SparkLogError
) -> SparkLogError:
    """A sequence error is the leader's word only (cluster mode): a deposed leader that has
    not noticed yet judges a retry by a producer state its successor has moved past, and
    an OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID from it would make the client
    bump its producer epoch and send again records that may already be written. So the
    error stands only once the fence confirms this broker still leads the partition; else
    the answer is NOT_LEADER_OR_FOLLOWER and the client asks the new leader."""
    handle = ctx.manager.handles.get((topic, index))
    if ctx.cluster is None or handle is None:
        return e
    try:
        await asyncio.get_running_loop().run_in_executor(None, handle.log.confirm_leadership)
    except SparkLogError as fenced:
        log.info("%s-%d: %s not answered: %s", topic, index, type(e).__name__, fenced)
        return fenced
    return e


async def produce(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any] | None:
    acks = int(req.acks)
    topics_out = []
    waits: list[tuple[dict[str, Any], PartitionHandle, int]] = []
    txn_denied = req.transactional_id is not None and not ctx.allowed(
        Op.WRITE, RT.TRANSACTIONAL_ID, req.transactional_id
    )
    for topic_data in req.topic_data:
        parts_out = []
        for pdata in topic_data.partition_data:
            if txn_denied:  # CVE-2018-17196: no transactional write without the ACL
                parts_out.append(_partition_error(
                    pdata.index, ErrorCode.transactional_id_authorization_failed,
                    f"{ctx.principal} may not WRITE transactional id {req.transactional_id!r}",
                ))  # fmt: skip
                continue
            if acks not in (0, 1, -1):
                parts_out.append(
                    _partition_error(pdata.index, ErrorCode.invalid_required_acks, None)
                )
                continue
            try:
                entry, handle, upto = _append_one(
                    ctx, topic_data.name, pdata.index, pdata.records, req.transactional_id
                )
            except (SparkLogError, ValueError) as e:
                if not isinstance(e, SparkLogError):
                    log.debug("produce to %s-%s refused: %s", topic_data.name, pdata.index, e)
                elif isinstance(e, _SEQUENCE_ERRORS):
                    log.info("produce to %s-%s refused: %s", topic_data.name, pdata.index, e)
                    e = await _confirmed(ctx, topic_data.name, pdata.index, e)
                out = _partition_error(pdata.index, error_code(e), str(e))
                if isinstance(e, RecordsRefusedError):
                    out["record_errors"] = [
                        {"batch_index": i, "batch_index_error_message": m}
                        for i, m in e.record_errors
                    ]
                parts_out.append(out)
                continue
            parts_out.append(entry)
            if handle is not None:
                waits.append((entry, handle, upto))
        topics_out.append({"name": topic_data.name, "partition_responses": parts_out})
    if acks == 0:
        # no answer, but the records must still become durable, hence visible to fetches
        for _entry, h, upto in waits:
            task = asyncio.get_running_loop().create_task(ctx.manager.wait_durable(h, upto))
            _BACKGROUND.add(task)
            task.add_done_callback(_background_done)
        return None
    results = await asyncio.gather(
        *(ctx.manager.wait_durable(h, upto) for _, h, upto in waits), return_exceptions=True
    )
    for (entry, _h, _upto), result in zip(waits, results, strict=True):
        if isinstance(result, BaseException):
            entry.update(
                error_code=_not_durable_code(result),
                base_offset=-1,
                error_message=f"not durable: {result}",
            )
    return {"responses": topics_out, "throttle_time": 0}
