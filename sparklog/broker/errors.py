"""The one table from sparklog errors to Kafka error codes."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from sparklog import errors
from sparklog.broker.batches import BatchError
from sparklog.broker.producers import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerError,
)

_BY_CLASS: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (errors.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (errors.UnknownTopicError, ErrorCode.unknown_topic_or_partition),
    (errors.UnknownPartitionError, ErrorCode.unknown_topic_or_partition),
    (errors.TopicExistsError, ErrorCode.topic_already_exists),
    (errors.InvalidConfigError, ErrorCode.invalid_config),
    (errors.RecordTooLargeError, ErrorCode.message_too_large),
    (errors.InvalidRecordsError, ErrorCode.invalid_record),
    (errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (errors.CorruptSegmentError, ErrorCode.kafka_storage_error),
    (errors.CorruptMetadataError, ErrorCode.kafka_storage_error),
    (errors.LogClosedError, ErrorCode.not_leader_or_follower),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (DuplicateSequenceError, ErrorCode.duplicate_sequence_number),
    (UnknownProducerError, ErrorCode.unknown_producer_id),
    (ValueError, ErrorCode.invalid_request),
)
_BATCH_KINDS = {
    "corrupt": ErrorCode.corrupt_message,
    "magic": ErrorCode.unsupported_for_message_format,
    "too_large": ErrorCode.message_too_large,
    "invalid": ErrorCode.invalid_record,
    "unsupported": ErrorCode.invalid_record,
}


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for ``exc`` (UNKNOWN_SERVER_ERROR for anything unexpected)."""
    if isinstance(exc, BatchError):
        return _BATCH_KINDS[exc.kind]
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error
