from __future__ import annotations

import pytest

from sparklog.errors import InvalidConfigError
from sparklog.storage.config import CONFIG_NAMES, TopicConfig


def test_defaults_are_kafkas() -> None:
    c = TopicConfig()
    assert c.retention_ms == 604_800_000
    assert c.retention_bytes == -1
    assert c.cleanup_policy == "delete"
    assert c.segment_bytes == 1_073_741_824
    assert c.segment_ms == 604_800_000
    assert c.min_compaction_lag_ms == 0
    assert c.delete_retention_ms == 86_400_000
    assert c.max_message_bytes == 1_048_588
    assert c.message_timestamp_type == "CreateTime"
    assert c.compression_type == "producer"
    assert (c.flush_messages, c.flush_ms) == (2**63 - 1, 2**63 - 1)  # Long.MAX_VALUE


def test_string_values_are_parsed() -> None:
    c = TopicConfig.from_mapping({"retention.ms": "1000", "cleanup.policy": "compact, delete"})
    assert c.retention_ms == 1000
    assert c.cleanup_policy == "compact,delete"
    assert c.compact and c.delete


def test_unknown_config_names_the_config() -> None:
    with pytest.raises(InvalidConfigError, match="retention.mss"):
        TopicConfig.from_mapping({"retention.mss": "1"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.ms", "-2"),
        ("segment.bytes", "10"),
        ("segment.bytes", "abc"),
        ("max.message.bytes", "-1"),
        ("cleanup.policy", "forever"),
        ("message.timestamp.type", "WallTime"),
        ("compression.type", "brotli"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("segment.ms", "0"),
        ("flush.messages", "0"),
        ("flush.ms", "-1"),
        ("flush.ms", str(2**63)),
    ],
)
def test_out_of_range_values_are_rejected(name: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=name.replace(".", r"\.")):
        TopicConfig.from_mapping({name: value})


def test_bool_is_not_an_integer() -> None:
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_mapping({"retention.ms": True})


def test_mapping_round_trips() -> None:
    c = TopicConfig.from_mapping(
        {"segment.bytes": "4096", "message.timestamp.type": "LogAppendTime"}
    )
    assert TopicConfig.from_mapping(c.to_mapping()) == c
    assert c.non_defaults() == {"segment.bytes": 4096, "message.timestamp.type": "LogAppendTime"}
    assert set(c.to_mapping()) == set(CONFIG_NAMES)


def test_with_overrides_validates() -> None:
    c = TopicConfig().with_overrides({"retention.ms": "5"})
    assert c.retention_ms == 5
    with pytest.raises(InvalidConfigError):
        c.with_overrides({"retention.ms": "x"})
