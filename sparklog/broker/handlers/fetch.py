"""Fetch: read stored Arrow batches up to the high watermark and encode them as Kafka
record batches; long-poll (``max_wait``/``min_bytes``) woken by group commits.

Fetch sessions (KIP-227) are not kept: every response says session 0, which tells clients
to send full fetch requests. ``max_bytes`` and ``partition_max_bytes`` limit the Arrow bytes
read, which track the encoded size closely; as Kafka does, the first partition with data
always returns at least one record batch.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.broker.partitions import PartitionHandle
from sparklog.errors import OffsetOutOfRangeError, SparkLogError
from sparklog.kafka.records import CODECS, encode_batches


def _read_partition(
    ctx: RequestContext, topic: str, p: Any, budget: int, first: bool
) -> tuple[dict[str, Any], PartitionHandle | None, int]:
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
    try:
        meta = ctx.manager.topic(topic)
        handle = ctx.manager.partition(topic, p.partition)
    except (SparkLogError, ValueError) as e:
        return {**base, "error_code": error_code(e)}, None, 0
    view = handle.log.view()
    hw, start = view.high_watermark, view.log_start_offset
    entry = {
        **base,
        "error_code": ErrorCode.none,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": start,
    }
    offset = int(p.fetch_offset)
    if offset < start or offset > hw:
        return {**entry, "error_code": ErrorCode.offset_out_of_range}, handle, 0
    limit = min(int(p.partition_max_bytes), budget)
    if offset == hw or (limit <= 0 and not first):
        return {**entry, "records": b""}, handle, 0
    try:
        batches = view.read(offset, max_bytes=max(limit, 1))
    except OffsetOutOfRangeError:
        return {**entry, "error_code": ErrorCode.offset_out_of_range}, handle, 0
    except SparkLogError as e:
        return {**entry, "error_code": error_code(e)}, handle, 0
    codec = CODECS.get(meta.config.compression_type, 0)
    data = encode_batches(batches, codec=codec)
    return {**entry, "records": data}, handle, len(data)


async def fetch(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    deadline = time.monotonic() + req.max_wait.total_seconds()
    min_bytes = max(int(req.min_bytes), 0)
    while True:
        budget = int(req.max_bytes) if int(req.max_bytes) > 0 else 2**31 - 1
        total = 0
        handles: list[PartitionHandle] = []
        responses = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                entry, handle, size = _read_partition(ctx, t.topic, p, budget, total == 0)
                parts.append(entry)
                total += size
                budget -= size
                if handle is not None:
                    handles.append(handle)
            responses.append({"topic": t.topic, "partitions": parts})
        remaining = deadline - time.monotonic()
        if total >= min_bytes or remaining <= 0 or not handles:
            break
        await ctx.manager.wait_for_data(handles, remaining)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": responses,
    }
