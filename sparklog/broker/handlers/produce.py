"""Produce: a request's partitions become calls of the append service
(``sparklog.broker.append``, which checks, appends and awaits durability) and its outcomes
the response.

What stays here is the request's own business: the principal's WRITE on each topic and on
the transactional id (CVE-2018-17196: no transactional write without it), and creating a
missing topic where the principal may. acks=0 gets no response, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.append import AppendOutcome
from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.errors import InvalidRequiredAcksError, SparkLogError
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT


def _partition_response(index: int, outcome: AppendOutcome) -> dict[str, Any]:
    e = outcome.error
    append_time = outcome.log_append_time_ms
    return {
        "index": index,
        "error_code": ErrorCode.none if e is None else error_code(e),
        "base_offset": outcome.base_offset,
        "log_append_time": append_time if append_time >= 0 else None,
        "log_start_offset": outcome.log_start_offset,
        "record_errors": [
            {"batch_index": i, "batch_index_error_message": m} for i, m in outcome.record_errors
        ],
        # Kafka answers INVALID_REQUIRED_ACKS without a message
        "error_message": None if e is None or isinstance(e, InvalidRequiredAcksError) else str(e),
    }


async def produce(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any] | None:
    acks = int(req.acks)
    tid = req.transactional_id
    appends = ctx.services.appends
    refused: SparkLogError | None = None  # the whole request's
    try:
        if tid is not None:
            ctx.require(Op.WRITE, RT.TRANSACTIONAL_ID, tid)
        appends.check_acks(acks)
    except SparkLogError as e:
        refused = e
    # one outcome per partition of the request, in its order; None: appended below
    outcomes: list[AppendOutcome | None] = []
    entries: list[tuple[str, int, bytes | None]] = []
    for topic_data in req.topic_data:
        topic = topic_data.name
        for pdata in topic_data.partition_data:
            if refused is not None:
                outcomes.append(AppendOutcome(error=refused))
                continue
            try:
                ctx.require(Op.WRITE, RT.TOPIC, topic)
                ctx.auto_create(topic)
            except (SparkLogError, ValueError) as e:
                outcomes.append(AppendOutcome(error=e))
                continue
            outcomes.append(None)
            entries.append((topic, pdata.index, pdata.records))
    appended = iter(
        await appends.append_records(entries, acks=acks, transactional_id=tid) if entries else ()
    )
    if acks == 0:
        return None
    answers = iter([next(appended) if o is None else o for o in outcomes])
    return {
        "responses": [
            {
                "name": t.name,
                "partition_responses": [
                    _partition_response(p.index, next(answers)) for p in t.partition_data
                ],
            }
            for t in req.topic_data
        ],
        "throttle_time": 0,
    }
