"""Every failure sparklog reports, one small class each, all under ``SparkLogError``.

Messages name the path, topic, partition and offsets involved. Bad arguments from a caller
are ``ValueError`` subclasses so that generic code handles them as such. The broker maps
these classes to Kafka error codes in exactly one table (``sparklog.broker.errors``); no
class here carries a Kafka code of its own (``KafkaRequestError`` carries the code a broker
*answered*, which is data, not a mapping).

Groups, in file order: storage and topics; leases; records a producer sends (record batches
and idempotence); consumer groups; the wire protocol and sparklog's own Kafka client; the
Spark DataSource; jobs and tools.
"""

from __future__ import annotations


class SparkLogError(Exception):
    """Base class of every sparklog error."""


# ---------------------------------------------------------------------------- storage, topics


class NoStorageError(SparkLogError, ValueError):
    """A path given as a storage root holds no sparklog storage."""


class InvalidTopicError(SparkLogError, ValueError):
    """A topic name breaks Kafka's naming rule or would escape the storage root."""


class InvalidConfigError(SparkLogError, ValueError):
    """A topic config name is unknown or its value is out of range."""


class InvalidPartitionsError(InvalidConfigError):
    """A partition count a request asked for is not allowed (not positive, or not above the
    topic's current count)."""


class InvalidRecordsError(SparkLogError, ValueError):
    """Records handed to ``append`` do not match the record schema."""


class RecordTooLargeError(SparkLogError, ValueError):
    """An appended batch is larger than the topic's ``max.message.bytes``."""


class ReplicaAssignmentError(SparkLogError, ValueError):
    """An explicit replica assignment Kafka would refuse (unknown brokers, gaps, repeats)."""


class InvalidReplicationFactorError(SparkLogError, ValueError):
    """A replication factor the storage cannot give (more copies than it keeps, or brokers)."""


class TopicExistsError(SparkLogError):
    """A topic with this name already exists."""


class UnknownTopicError(SparkLogError):
    """No topic with this name exists."""


class UnknownPartitionError(SparkLogError):
    """The topic has no partition with this number."""


class OffsetOutOfRangeError(SparkLogError):
    """A requested offset is below the log start offset or above the high watermark."""


class OffsetNotAvailableError(SparkLogError):
    """A fetch from a follower asked for an offset past the high watermark that follower
    has read so far (it may not have caught up yet: retriable)."""


class CorruptSegmentError(SparkLogError):
    """A segment file fails its checksum or cannot be decoded."""


class CorruptMetadataError(SparkLogError):
    """A manifest, topic metadata or checkpoint file cannot be parsed."""


class ManifestConflictError(SparkLogError):
    """Another writer committed the manifest version this writer tried to create."""


class SegmentNotLiveError(SparkLogError):
    """A segment a swap wants to replace is no longer named by the latest manifest."""


class LogClosedError(SparkLogError):
    """The partition log was closed."""


class CompactionOutputError(SparkLogError):
    """A segment rewritten by compaction does not hold what the plan says it must."""


# ---------------------------------------------------------------------------- leases


class LeaseHeldError(SparkLogError):
    """Another holder has the named lease."""


class DataDirLockedError(LeaseHeldError):
    """Another process holds the exclusive lease (lock) on this data directory."""


class CompactionRunningError(LeaseHeldError):
    """Another compaction job holds this topic's compaction lease."""


class LeaseLostError(SparkLogError):
    """A lease this process held expired or was taken over; its epoch is fenced."""


class ForeignWriterError(LeaseLostError):
    """Another writer wrote to storage this broker writes alone (a newer leader epoch it did
    not commit, or a changed owner record): it stops acknowledging writes."""


class StorageOwnedError(SparkLogError):
    """A storage root belongs to a broker of another mode or another cluster (its owner
    record names it)."""


class DataDirNotDirectoryError(SparkLogError, ValueError):
    """A broker's data dir is an existing file, not a directory."""


class ObjectStoreError(SparkLogError):
    """An object-store root cannot be used: the endpoint is unreachable, the bucket is
    missing, the credentials are missing or refused, or the s3 extra is not installed; or
    a request failed after its retries (5xx answers, lost connections, a stalled store)."""


class NotLeaderError(SparkLogError):
    """This broker does not lead the partition (cluster mode): ask the leader."""


class FencedLeaderEpochError(SparkLogError):
    """A request named a leader epoch older than the partition's current one (KIP-320)."""


class UnknownLeaderEpochError(SparkLogError):
    """A request named a leader epoch newer than this broker knows (KIP-320)."""


class CoordinationError(SparkLogError):
    """etcd could not be reached, or refused what a broker asked (a clear message says)."""


class NodeIdTakenError(CoordinationError):
    """Another process holds this node id's registration (or its previous incarnation's
    lease has not expired yet)."""


class EtcdAccessError(CoordinationError):
    """etcd refused this client: TLS certificates not trusted either way, a wrong user or
    password, or no permission on the cluster's keys; retrying cannot cure it."""


# ---------------------------------------------------------------------------- produced records


class BatchError(SparkLogError):
    """A record batch a producer sent is refused (one subclass per reason)."""


class CorruptBatchError(BatchError):
    """A record batch fails its CRC, is truncated, or its records do not decode."""


class UnsupportedMagicError(BatchError):
    """A record batch uses a message format other than magic 2 (Kafka 0.11+)."""


class BatchTooLargeError(BatchError):
    """A record batch decompresses past the broker's limit (a decompression bomb)."""


class InvalidBatchError(BatchError):
    """A record batch's header contradicts its records (counts, offsets, no records)."""


class RecordsRefusedError(InvalidRecordsError):
    """A batch refused because of some of its records (KIP-467): ``record_errors`` says
    which (index in the batch) and why."""

    def __init__(self, message: str, errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = errors

    def __reduce__(self) -> tuple[type[RecordsRefusedError], tuple[str, list[tuple[int, str]]]]:
        return type(self), (str(self), self.record_errors)


class OutOfOrderSequenceError(SparkLogError):
    """A produce batch's sequence does not follow the producer's last one."""


class DuplicateSequenceError(SparkLogError):
    """A produce batch lies wholly before the producer's last five: it was written before."""


class UnknownProducerError(SparkLogError):
    """A produce batch continues a producer this partition has no state for."""


class InvalidProducerEpochError(SparkLogError):
    """A produce batch carries an epoch older than the producer's current one (fenced)."""


class InvalidRequiredAcksError(SparkLogError):
    """A produce request's ``acks`` is not 0, 1 or -1 (all)."""


class NotDurableError(SparkLogError):
    """Appended records were not made durable, so never acknowledged: ``cause`` is why (a
    failed fsync, or a refusal of the log's, which answers with its own code)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"not durable: {cause}")
        self.cause = cause

    def __reduce__(self) -> tuple[type[NotDurableError], tuple[BaseException]]:
        return type(self), (self.cause,)


class TailUnavailableError(SparkLogError):
    """A broker on object storage could not commit appended records in time (the object
    store or etcd failing or stalling): they are not acknowledged, and may still be
    committed later (a producer's retry is deduplicated if it is idempotent)."""


class UnconfirmedAppendError(NotDurableError):
    """Appended records whose leadership check failed after the append (another broker
    leads now): they may or may not be in the log, and the next leader's recovery decides."""


# ---------------------------------------------------------------------------- consumer groups


class TransactionError(SparkLogError):
    """A transactional request the transaction coordinator refuses (one subclass per
    reason)."""


class ProducerFencedError(TransactionError):
    """A newer producer with the same transactional id took over (a higher epoch)."""


class InvalidTxnStateError(TransactionError):
    """The request does not fit the transaction's state (e.g. EndTxn with none begun)."""


class InvalidProducerIdMappingError(TransactionError):
    """The producer id is not the one the transactional id holds."""


class InvalidTransactionTimeoutError(TransactionError, ValueError):
    """A transaction timeout above the broker's ``transaction_max_timeout_ms``."""


class ConcurrentTransactionsError(TransactionError):
    """The previous transaction of this id is still being completed; retry."""


class TransactionalIdNotFoundError(TransactionError):
    """No transaction state for this transactional id."""


class OperationNotAttemptedError(TransactionError):
    """A partition of a request was not tried because another partition of it failed."""


class GroupError(SparkLogError):
    """A consumer-group request the coordinator refuses (one subclass per reason)."""


class InvalidGroupIdError(GroupError):
    """The group id is empty."""


class InvalidSessionTimeoutError(GroupError):
    """A member's session timeout is outside the broker's allowed range."""


class InconsistentGroupProtocolError(GroupError):
    """A member's protocol type or protocols share nothing with the group's."""


class FencedInstanceIdError(GroupError):
    """A static member's instance id now belongs to a newer member id."""


class UnknownMemberIdError(GroupError):
    """The member id is not (or no longer) a member of the group."""


class IllegalGenerationError(GroupError):
    """A request carries a generation other than the group's current one."""


class RebalanceInProgressError(GroupError):
    """The group is rebalancing: the member must rejoin first."""


class NotCoordinatorError(GroupError):
    """This broker is not the group's coordinator (cluster mode): find it again."""


class NonEmptyGroupError(GroupError):
    """A group with active members cannot be deleted."""


class GroupNotFoundError(GroupError):
    """No group with this id has members or committed offsets."""


class CoordinatorNotAvailableError(GroupError):
    """A group or transactional id has no live coordinator yet (cluster mode)."""


class UnstableOffsetCommitError(GroupError):
    """A partition's committed offset belongs to a transaction not decided yet (KIP-447)."""


class GroupSubscribedToTopicError(GroupError):
    """OffsetDelete of a topic a live member of the group subscribes to (KIP-496)."""


class OffsetCommitStorageError(GroupError):
    """Committed offsets could not be written to ``__consumer_offsets``."""


# ---------------------------------------------------------------------------- security


class SecurityError(SparkLogError):
    """Base of authentication and authorization failures."""


class AuthenticationError(SecurityError):
    """SASL or TLS authentication failed: wrong credentials, unknown user, bad exchange."""


class UnsupportedSaslMechanismError(AuthenticationError):
    """The client asked for a SASL mechanism the listener does not enable."""


class IllegalSaslStateError(AuthenticationError):
    """A SASL request out of order (e.g. SaslAuthenticate before SaslHandshake)."""


class AuthorizationError(SecurityError):
    """The principal may not do this (an ACL denies it, or none allows it)."""


class TopicAuthorizationError(AuthorizationError):
    """TOPIC_AUTHORIZATION_FAILED."""


class TopicsDeniedError(TopicAuthorizationError):
    """Some of the topics of one request are denied: ``denied`` holds their partitions."""

    def __init__(self, denied: set[tuple[str, int]]) -> None:
        super().__init__(f"topics denied: {', '.join(sorted({t for t, _ in denied}))}")
        self.denied = denied

    def __reduce__(self) -> tuple[type[TopicsDeniedError], tuple[set[tuple[str, int]]]]:
        return type(self), (self.denied,)


class GroupAuthorizationError(AuthorizationError, GroupError):
    """GROUP_AUTHORIZATION_FAILED."""


class ClusterAuthorizationError(AuthorizationError):
    """CLUSTER_AUTHORIZATION_FAILED."""


class TransactionalIdAuthorizationError(AuthorizationError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""


class SecurityDisabledError(SecurityError):
    """An ACL or credential request to a broker whose authorizer or SASL is off."""


class UnknownCredentialError(SecurityError):
    """A SCRAM credential a request describes or deletes does not exist."""


class DuplicateCredentialError(SecurityError):
    """One request alters the same user's credential of one mechanism twice."""


class UnacceptableCredentialError(SecurityError, ValueError):
    """A SCRAM credential is refused: empty user name, salt or password, or iterations out
    of range."""


# ---------------------------------------------------------------------------- wire, client


class UnsupportedResourceTypeError(SparkLogError, ValueError):
    """DescribeConfigs or AlterConfigs names a resource type sparklog does not serve."""


class UnsupportedVersionError(SparkLogError):
    """A client asked for ApiVersions at a version the broker does not serve (it is
    answered at v0 with the versions it serves, as Kafka does)."""


class StaticBrokerConfigError(SparkLogError, ValueError):
    """AlterConfigs asks to change a broker config that only the broker's TOML file sets."""


class UnsupportedCoordinatorTypeError(SparkLogError, ValueError):
    """FindCoordinator asks for a key type other than group (0) and transaction (1)."""


class InvalidTimestampTargetError(SparkLogError, ValueError):
    """ListOffsets asks for a negative timestamp Kafka gives no meaning (-1 latest, -2
    earliest, -3 max timestamp)."""


class FrameError(SparkLogError):
    """A request frame that cannot be parsed: the connection is closed."""


class KafkaConnectionError(SparkLogError, ConnectionError):
    """sparklog's Kafka client cannot reach a broker, or the connection broke."""


class KafkaRequestError(SparkLogError):
    """A broker answered a request of sparklog's own client with an error code."""

    def __init__(self, what: str, code: int, message: str | None = None) -> None:
        name = getattr(code, "name", str(code))
        super().__init__(f"{what}: {name.upper()}" + (f" ({message})" if message else ""))
        self.what, self.code, self.message = what, code, message

    def __reduce__(self) -> tuple[type[KafkaRequestError], tuple[str, int, str | None]]:
        return type(self), (self.what, self.code, self.message)


# ---------------------------------------------------------------------------- Spark DataSource


class OptionError(SparkLogError, ValueError):
    """A format("sparklog") option is unknown, malformed or contradicts another."""


class SparkMissingError(SparkLogError, ImportError):
    """The Spark side is used where PySpark is not installed, or too old a version is."""


class SinkWriteError(SparkLogError):
    """The Spark sink could not write its records through the broker."""


# ---------------------------------------------------------------------------- schemas


class SchemaRegistryError(SparkLogError):
    """A Schema Registry request failed: ``status`` is the HTTP status and ``code`` the
    registry's error code (Confluent's numbers, e.g. 40401), as its REST API answers."""

    status = 500
    code = 50001

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class SubjectNotFoundError(SchemaRegistryError):
    status, code = 404, 40401


class VersionNotFoundError(SchemaRegistryError):
    status, code = 404, 40402


class SchemaNotFoundError(SchemaRegistryError):
    status, code = 404, 40403


class SubjectNotSoftDeletedError(SchemaRegistryError):
    status, code = 404, 40405


class VersionNotSoftDeletedError(SchemaRegistryError):
    status, code = 404, 40407


class SubjectConfigNotFoundError(SchemaRegistryError):
    status, code = 404, 40408


class SubjectModeNotFoundError(SchemaRegistryError):
    status, code = 404, 40409


class IncompatibleSchemaError(SchemaRegistryError):
    status, code = 409, 409


class InvalidSchemaError(SchemaRegistryError, ValueError):
    status, code = 422, 42201


class InvalidVersionError(SchemaRegistryError, ValueError):
    status, code = 422, 42202


class InvalidCompatibilityLevelError(SchemaRegistryError, ValueError):
    status, code = 422, 42203


class InvalidModeError(SchemaRegistryError, ValueError):
    status, code = 422, 42204


class OperationNotPermittedError(SchemaRegistryError):
    status, code = 422, 42205


class SchemaReferencedError(SchemaRegistryError):
    status, code = 422, 42206


class RegistryUnavailableError(SchemaRegistryError):
    """No broker can write to the registry now (cluster mode: ``_schemas`` has no leader),
    or the registry could not be reached."""

    status, code = 500, 50003


class SchemaDecodeError(SparkLogError):
    """A record's key or value cannot be decoded with its schema (its topic, partition and
    offset are in the message)."""


class RegistryUnauthorizedError(AuthenticationError):
    """A Schema Registry request without valid HTTP basic credentials (HTTP 401)."""


class RegistryForbiddenError(AuthorizationError):
    """A Schema Registry request whose principal may not change the subject (HTTP 403)."""


class SchemasTooComplexError(SparkLogError):
    """Two JSON Schemas have too many alternatives (anyOf/oneOf) to compare."""


class UnusableWriterSchemaError(SparkLogError):
    """A record's writer schema cannot decode its column (unknown id, wrong format)."""


class JsonTypeError(SparkLogError, ValueError):
    """A JSON document does not fit the reader schema's type."""


# ---------------------------------------------------------------------------- jobs, tools


class ExportUsageError(SparkLogError, ValueError):
    """An export's arguments are missing, malformed or contradict each other."""


class ConfigFileError(SparkLogError, ValueError):
    """A broker config file is not TOML, names a table or setting sparklog does not have,
    or gives a setting a value of the wrong type."""


class DemoCheckError(SparkLogError):
    """A step of the demo does not match the model of what was produced."""


class DemoSetupError(SparkLogError, RuntimeError):
    """A demo cannot start what it runs on: a program or package is missing, too old, or
    did not start; the message says how to get it."""


class JarsMissingError(SparkLogError, RuntimeError):
    """The jars of a purpose are not fetched: the message says how to fetch them."""
