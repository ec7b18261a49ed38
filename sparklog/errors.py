"""Every failure sparklog reports, one small class each.

Messages name the path, topic, partition and offsets involved. Bad arguments from a caller
are ``ValueError`` subclasses so that generic code handles them as such; the broker maps
these classes to Kafka error codes in exactly one table.
"""

from __future__ import annotations


class SparkLogError(Exception):
    """Base class of every sparklog error."""


class InvalidTopicError(SparkLogError, ValueError):
    """A topic name breaks Kafka's naming rule or would escape the storage root."""


class InvalidConfigError(SparkLogError, ValueError):
    """A topic config name is unknown or its value is out of range."""


class InvalidRecordsError(SparkLogError, ValueError):
    """Records handed to ``append`` do not match the record schema."""


class RecordTooLargeError(SparkLogError, ValueError):
    """An appended batch is larger than the topic's ``max.message.bytes``."""


class TopicExistsError(SparkLogError):
    """A topic with this name already exists."""


class UnknownTopicError(SparkLogError):
    """No topic with this name exists."""


class UnknownPartitionError(SparkLogError):
    """The topic has no partition with this number."""


class OffsetOutOfRangeError(SparkLogError):
    """A requested offset is below the log start offset or above the high watermark."""


class CorruptSegmentError(SparkLogError):
    """A segment file fails its checksum or cannot be decoded."""


class CorruptMetadataError(SparkLogError):
    """A manifest, topic metadata or checkpoint file cannot be parsed."""


class ManifestConflictError(SparkLogError):
    """Another writer committed the manifest version this writer tried to create."""


class SegmentNotLiveError(SparkLogError):
    """A segment a swap wants to replace is no longer named by the latest manifest."""


class DataDirLockedError(SparkLogError):
    """Another process holds the exclusive lock on this data directory."""


class CompactionRunningError(SparkLogError):
    """Another compaction job is rewriting this topic."""


class CompactionOutputError(SparkLogError):
    """A segment rewritten by compaction does not hold what the plan says it must."""


class LogClosedError(SparkLogError):
    """The partition log was closed."""
