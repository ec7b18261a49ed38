"""The one table from sparklog errors to Kafka error codes.

Every handler turns a refused request into its Kafka code here (``error_code``); no error
class carries a code of its own. The first matching row wins, so subclasses come before
their bases, and ``ValueError`` (a bad argument anywhere) is last.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from sparklog import errors as e

_BY_CLASS: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    # storage and topics
    (e.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (e.UnknownTopicError, ErrorCode.unknown_topic_or_partition),
    (e.UnknownPartitionError, ErrorCode.unknown_topic_or_partition),
    (e.TopicExistsError, ErrorCode.topic_already_exists),
    (e.ReplicaAssignmentError, ErrorCode.invalid_replica_assignment),
    (e.InvalidReplicationFactorError, ErrorCode.invalid_replication_factor),
    (e.InvalidPartitionsError, ErrorCode.invalid_partitions),
    (e.InvalidConfigError, ErrorCode.invalid_config),
    (e.RecordTooLargeError, ErrorCode.message_too_large),
    (e.InvalidRecordsError, ErrorCode.invalid_record),
    (e.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (e.OffsetNotAvailableError, ErrorCode.offset_not_available),
    (e.CorruptSegmentError, ErrorCode.kafka_storage_error),
    (e.CorruptMetadataError, ErrorCode.kafka_storage_error),
    (e.LogClosedError, ErrorCode.not_leader_or_follower),
    (e.ForeignWriterError, ErrorCode.kafka_storage_error),
    (e.ObjectStoreError, ErrorCode.kafka_storage_error),
    (e.LeaseLostError, ErrorCode.not_leader_or_follower),
    (e.NotLeaderError, ErrorCode.not_leader_or_follower),
    (e.TailUnavailableError, ErrorCode.request_timed_out),
    (e.FencedLeaderEpochError, ErrorCode.fenced_leader_epoch),
    (e.UnknownLeaderEpochError, ErrorCode.unknown_leader_epoch),
    # record batches a producer sent
    (e.CorruptBatchError, ErrorCode.corrupt_message),
    (e.UnsupportedMagicError, ErrorCode.unsupported_for_message_format),
    (e.BatchTooLargeError, ErrorCode.message_too_large),
    (e.InvalidBatchError, ErrorCode.invalid_record),
    # produce requests and their durability
    (e.InvalidRequiredAcksError, ErrorCode.invalid_required_acks),
    (e.UnconfirmedAppendError, ErrorCode.request_timed_out),
    (e.NotDurableError, ErrorCode.kafka_storage_error),
    # idempotent producers
    (e.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (e.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (e.DuplicateSequenceError, ErrorCode.duplicate_sequence_number),
    (e.UnknownProducerError, ErrorCode.unknown_producer_id),
    # transactions
    (e.ProducerFencedError, ErrorCode.producer_fenced),
    (e.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (e.InvalidProducerIdMappingError, ErrorCode.invalid_producer_id_mapping),
    (e.InvalidTransactionTimeoutError, ErrorCode.invalid_transaction_timeout),
    (e.ConcurrentTransactionsError, ErrorCode.concurrent_transactions),
    (e.TransactionalIdNotFoundError, ErrorCode.transactional_id_not_found),
    (e.OperationNotAttemptedError, ErrorCode.operation_not_attempted),
    # consumer groups
    (e.InvalidGroupIdError, ErrorCode.invalid_group_id),
    (e.InvalidSessionTimeoutError, ErrorCode.invalid_session_timeout),
    (e.InconsistentGroupProtocolError, ErrorCode.inconsistent_group_protocol),
    (e.FencedInstanceIdError, ErrorCode.fenced_instance_id),
    (e.UnknownMemberIdError, ErrorCode.unknown_member_id),
    (e.IllegalGenerationError, ErrorCode.illegal_generation),
    (e.RebalanceInProgressError, ErrorCode.rebalance_in_progress),
    (e.NotCoordinatorError, ErrorCode.not_coordinator),
    (e.NonEmptyGroupError, ErrorCode.non_empty_group),
    (e.GroupNotFoundError, ErrorCode.group_id_not_found),
    (e.CoordinatorNotAvailableError, ErrorCode.coordinator_not_available),
    (e.UnstableOffsetCommitError, ErrorCode.unstable_offset_commit),
    (e.GroupSubscribedToTopicError, ErrorCode.group_subscribed_to_topic),
    (e.OffsetCommitStorageError, ErrorCode.kafka_storage_error),
    # security
    (e.TopicAuthorizationError, ErrorCode.topic_authorization_failed),
    (e.GroupAuthorizationError, ErrorCode.group_authorization_failed),
    (e.ClusterAuthorizationError, ErrorCode.cluster_authorization_failed),
    (e.TransactionalIdAuthorizationError, ErrorCode.transactional_id_authorization_failed),
    (e.UnsupportedSaslMechanismError, ErrorCode.unsupported_sasl_mechanism),
    (e.IllegalSaslStateError, ErrorCode.illegal_sasl_state),
    (e.AuthenticationError, ErrorCode.sasl_authentication_failed),
    (e.SecurityDisabledError, ErrorCode.security_disabled),
    (e.UnknownCredentialError, ErrorCode.resource_not_found),
    (e.DuplicateCredentialError, ErrorCode.duplicate_resource),
    (e.UnacceptableCredentialError, ErrorCode.unacceptable_credential),
    # the protocol itself
    (e.UnsupportedVersionError, ErrorCode.unsupported_version),
    # anything else a caller got wrong
    (e.UnsupportedResourceTypeError, ErrorCode.invalid_request),
    (e.StaticBrokerConfigError, ErrorCode.invalid_request),
    (e.UnsupportedCoordinatorTypeError, ErrorCode.invalid_request),
    (e.InvalidTimestampTargetError, ErrorCode.invalid_request),
    (ValueError, ErrorCode.invalid_request),
)


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for ``exc`` (UNKNOWN_SERVER_ERROR for anything unexpected).

    Records not made durable because the log refused the round with a sparklog error
    answer with that error's code; a failed fsync is KAFKA_STORAGE_ERROR, and leadership
    lost after the append (``UnconfirmedAppendError``) REQUEST_TIMED_OUT."""
    if type(exc) is e.NotDurableError and isinstance(exc.cause, e.SparkLogError):
        exc = exc.cause
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error
