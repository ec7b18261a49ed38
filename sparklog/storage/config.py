"""Per-topic configs: Kafka's names, defaults and ranges.

Values arrive as strings (as in Kafka's CreateTopics and the CLI) or as Python values;
``TopicConfig.from_mapping`` validates every one and rejects unknown names.
``compression.type`` applies to record batches served to Kafka consumers (``producer``: in
the codec each batch was produced with, kept in the records' attribute bits); sealed
segments are always zstd Parquet and the active segment holds uncompressed Arrow.

``flush.messages`` and ``flush.ms`` (Kafka's fsync policy: after so many records, after so
long) are accepted with Kafka's types, ranges and defaults, stored and described, and change
nothing: the log fsyncs every record before it is acknowledged (group commit), which is
what ``flush.messages=1`` asks of Kafka, so no setting can ask for more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import InvalidConfigError

_CLEANUP_POLICIES = {"delete", "compact", "compact,delete", "delete,compact"}
_TIMESTAMP_TYPES = {"CreateTime", "LogAppendTime"}
_COMPRESSION_TYPES = {"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"}
_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1


def _int_parser(name: str, lo: int, hi: int) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise InvalidConfigError(f"{name} must be an integer, got {raw!r}")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(f"{name} must be an integer, got {raw!r}") from None
        if not lo <= value <= hi:
            raise InvalidConfigError(f"{name}={value} is out of range [{lo}, {hi}]")
        return value

    return parse


def _float_parser(name: str, lo: float, hi: float) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(f"{name} must be a number, got {raw!r}") from None
        if not lo <= value <= hi:
            raise InvalidConfigError(f"{name}={value} is out of range [{lo}, {hi}]")
        return value

    return parse


def _choice_parser(name: str, choices: set[str]) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip()
        if name == "cleanup.policy":
            value = ",".join(p.strip() for p in value.split(","))
        if value not in choices:
            raise InvalidConfigError(f"{name}={raw!r} is not one of {sorted(choices)}")
        return value

    return parse


def _bool_parser(name: str) -> Callable[[Any], bool]:
    def parse(raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        value = str(raw).strip().lower()
        if value not in ("true", "false"):
            raise InvalidConfigError(f"{name} must be true or false, got {raw!r}")
        return value == "true"

    return parse


#: Confluent's subject name strategies (``confluent.*.subject.name.strategy``), short names
SUBJECT_STRATEGIES = {"TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"}


def _strategy_parser(name: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().rsplit(".", 1)[-1]
        if value not in SUBJECT_STRATEGIES:
            raise InvalidConfigError(f"{name}={raw!r} is not one of {sorted(SUBJECT_STRATEGIES)}")
        return value

    return parse


# name -> (attribute, parser); Kafka's defaults are the dataclass defaults below.
_PARSERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "retention.ms": ("retention_ms", _int_parser("retention.ms", -1, _LONG_MAX)),
    "retention.bytes": ("retention_bytes", _int_parser("retention.bytes", -1, _LONG_MAX)),
    "cleanup.policy": ("cleanup_policy", _choice_parser("cleanup.policy", _CLEANUP_POLICIES)),
    "segment.bytes": ("segment_bytes", _int_parser("segment.bytes", 14, _INT_MAX)),
    "segment.ms": ("segment_ms", _int_parser("segment.ms", 1, _LONG_MAX)),
    "min.compaction.lag.ms": (
        "min_compaction_lag_ms",
        _int_parser("min.compaction.lag.ms", 0, _LONG_MAX),
    ),
    "max.compaction.lag.ms": (
        "max_compaction_lag_ms",
        _int_parser("max.compaction.lag.ms", 1, _LONG_MAX),
    ),
    "delete.retention.ms": (
        "delete_retention_ms",
        _int_parser("delete.retention.ms", 0, _LONG_MAX),
    ),
    "max.message.bytes": ("max_message_bytes", _int_parser("max.message.bytes", 0, _INT_MAX)),
    "message.timestamp.type": (
        "message_timestamp_type",
        _choice_parser("message.timestamp.type", _TIMESTAMP_TYPES),
    ),
    "compression.type": (
        "compression_type",
        _choice_parser("compression.type", _COMPRESSION_TYPES),
    ),
    "min.cleanable.dirty.ratio": (
        "min_cleanable_dirty_ratio",
        _float_parser("min.cleanable.dirty.ratio", 0.0, 1.0),
    ),
    "file.delete.delay.ms": (
        "file_delete_delay_ms",
        _int_parser("file.delete.delay.ms", 0, _LONG_MAX),
    ),
    "index.interval.bytes": (
        "index_interval_bytes",
        _int_parser("index.interval.bytes", 0, _INT_MAX),
    ),
    # accepted and kept, no effect: every acknowledged record is already durable
    "flush.messages": ("flush_messages", _int_parser("flush.messages", 1, _LONG_MAX)),
    "flush.ms": ("flush_ms", _int_parser("flush.ms", 0, _LONG_MAX)),
    # broker-side schema validation (docs/schemas.md): Confluent Server's names
    "confluent.value.schema.validation": (
        "value_schema_validation",
        _bool_parser("confluent.value.schema.validation"),
    ),
    "confluent.key.schema.validation": (
        "key_schema_validation",
        _bool_parser("confluent.key.schema.validation"),
    ),
    "confluent.value.subject.name.strategy": (
        "value_subject_name_strategy",
        _strategy_parser("confluent.value.subject.name.strategy"),
    ),
    "confluent.key.subject.name.strategy": (
        "key_subject_name_strategy",
        _strategy_parser("confluent.key.subject.name.strategy"),
    ),
}


@dataclass(frozen=True)
class TopicConfig:
    """A topic's validated configs (Kafka defaults)."""

    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX
    delete_retention_ms: int = 24 * 3600 * 1000
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60_000
    index_interval_bytes: int = 4096
    flush_messages: int = _LONG_MAX
    flush_ms: int = _LONG_MAX
    value_schema_validation: bool = False
    key_schema_validation: bool = False
    value_subject_name_strategy: str = "TopicNameStrategy"
    key_subject_name_strategy: str = "TopicNameStrategy"

    @classmethod
    def from_mapping(cls, configs: Mapping[str, Any] | None = None) -> TopicConfig:
        """Validate Kafka-named configs; unknown names raise InvalidConfigError."""
        values: dict[str, Any] = {}
        for name, raw in (configs or {}).items():
            if name not in _PARSERS:
                raise InvalidConfigError(
                    f"unknown topic config {name!r}; known: {', '.join(sorted(_PARSERS))}"
                )
            attr, parse = _PARSERS[name]
            values[attr] = parse(raw)
        return cls(**values)

    def rolls(self, size_bytes: int, age_ms: int) -> bool:
        """Whether an active segment of ``size_bytes`` (with what is about to be appended)
        created ``age_ms`` ago rolls (Kafka's segment.bytes and segment.ms)."""
        return size_bytes > self.segment_bytes or age_ms >= self.segment_ms

    def with_overrides(self, configs: Mapping[str, Any]) -> TopicConfig:
        merged = {**self.to_mapping(), **dict(configs)}
        return TopicConfig.from_mapping(merged)

    def to_mapping(self) -> dict[str, Any]:
        """Kafka names -> values, for metadata files and DescribeConfigs."""
        return {name: getattr(self, attr) for name, (attr, _) in _PARSERS.items()}

    def strings(self) -> dict[str, str]:
        """Kafka names -> values as Kafka spells them (``true``, not ``True``)."""
        return {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in self.to_mapping().items()
        }

    def non_defaults(self) -> dict[str, Any]:
        default = TopicConfig()
        return {
            name: getattr(self, attr)
            for name, (attr, _) in _PARSERS.items()
            if getattr(self, attr) != getattr(default, attr)
        }

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


CONFIG_NAMES = tuple(_PARSERS)
