"""ListOffsets (earliest, latest, by timestamp, max timestamp) and DeleteRecords."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.errors import InvalidTimestampTargetError, OffsetOutOfRangeError, SparkLogError
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT
from sparklog.storage.reader import LogView

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


def max_timestamp_offset(view: LogView) -> tuple[int, int]:
    """(timestamp, offset) of the record with the largest timestamp (the earliest such)."""
    best_ts, best_off = -1, -1
    for batch in view.batches(view.log_start_offset):
        ts = batch.column("timestamp").cast(pa.int64())
        top = pc.max(ts).as_py()
        if top is not None and top > best_ts:
            i = pc.index(ts, top).as_py()
            best_ts, best_off = int(top), int(batch.column("offset")[i].as_py())
    return best_ts, best_off


def _timestamp_at(view: LogView, offset: int) -> int:
    for batch in view.batches(offset, offset + 1):
        return int(batch.column("timestamp").cast(pa.int64())[0].as_py())
    return -1


async def list_offsets(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """ListOffsets; "latest" is the last stable offset for ``read_committed`` (isolation
    level 1), as in Kafka, else the high watermark."""
    committed = int(getattr(req, "isolation_level", 0)) == 1
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            try:
                ctx.require(Op.DESCRIBE, RT.TOPIC, t.name)
                ctx.manager.topic(t.name)
                current = int(getattr(p, "current_leader_epoch", -1))
                handle = ctx.manager.led(t.name, p.partition_index, current)
                view = handle.log.view()
                entry["leader_epoch"] = handle.leader_epoch
                target = int(p.timestamp)
                if target == LATEST:
                    entry["offset"] = view.last_stable_offset if committed else view.high_watermark
                elif target == EARLIEST:
                    entry["offset"] = view.log_start_offset
                elif target == MAX_TIMESTAMP:
                    entry["timestamp"], entry["offset"] = max_timestamp_offset(view)
                elif target < 0:
                    raise InvalidTimestampTargetError(
                        f"{t.name}-{p.partition_index}: timestamp {target} is not a time, nor "
                        f"latest ({LATEST}), earliest ({EARLIEST}) or max ({MAX_TIMESTAMP})"
                    )
                else:
                    found = view.offset_for_timestamp(target)
                    if found is not None:
                        entry["offset"] = found
                        entry["timestamp"] = _timestamp_at(view, found)
            except (SparkLogError, ValueError) as e:
                entry["error_code"] = error_code(e)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


async def offset_for_leader_epoch(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """Where each asked leader epoch ends (KIP-101/KIP-320: clients check their position
    after a leader change, and truncate what a deposed leader showed them and the new one
    does not hold)."""
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {
                "error_code": ErrorCode.none,
                "partition": p.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            try:
                if int(getattr(req, "replica_id", -1)) >= 0:
                    ctx.require(Op.CLUSTER_ACTION, RT.CLUSTER)
                else:
                    ctx.require(Op.DESCRIBE, RT.TOPIC, t.topic)
                ctx.manager.topic(t.topic)
                current = int(getattr(p, "current_leader_epoch", -1))
                handle = ctx.manager.led(t.topic, p.partition, current)
                entry["leader_epoch"], entry["end_offset"] = handle.log.end_offset_for_epoch(
                    int(p.leader_epoch)
                )
            except (SparkLogError, ValueError) as e:
                entry["error_code"] = error_code(e)
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


async def delete_records(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "low_watermark": -1,
                "error_code": ErrorCode.none,
            }
            try:
                ctx.require(Op.DELETE, RT.TOPIC, t.name)
                ctx.manager.topic(t.name)
                handle = ctx.manager.partition(t.name, p.partition_index)
                offset = int(p.offset)
                if offset == -1:
                    offset = handle.log.high_watermark
                if offset < 0:  # Kafka's answer, not INVALID_REQUEST
                    raise OffsetOutOfRangeError(f"offset {offset} is below -1")
                entry["low_watermark"] = handle.log.delete_records(offset)
            except (SparkLogError, ValueError) as e:
                entry["error_code"] = error_code(e)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
