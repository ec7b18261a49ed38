"""``StreamOffsets`` (``sparklog.datasource.offsets``): the one conversion between Spark's
nested offsets JSON and the flat per-partition form a Kafka commit takes."""

from __future__ import annotations

import json

import pytest

from sparklog.datasource.group_offsets import REPORT_KEY
from sparklog.datasource.offsets import StreamOffsets


def test_nested_and_flat_forms_round_trip() -> None:
    nested = {"b": {"1": 7, "0": 3}, "a": {"10": 1}}
    offsets = StreamOffsets.from_spark(nested)
    assert offsets.flat() == {("b", 1): 7, ("b", 0): 3, ("a", 10): 1}
    assert offsets.to_spark() == {"a": {"10": 1}, "b": {"0": 3, "1": 7}}
    assert list(offsets.to_spark()) == ["a", "b"]  # topics, then partitions, in order
    assert StreamOffsets(offsets.flat()) == offsets


def test_the_sources_report_is_never_read_as_offsets() -> None:
    reported = {"t": {"0": 5}, REPORT_KEY: {"group": "g", "bootstrap": "h:1"}}
    assert StreamOffsets.parse(json.dumps(reported)).flat() == {("t", 0): 5}


@pytest.mark.parametrize("text", ["None", "12", "[1, 2]", ""])
def test_text_that_is_no_json_object_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        StreamOffsets.parse(text)


def test_restricted_to_keeps_only_the_partitions_named() -> None:
    offsets = StreamOffsets({("t", 0): 1, ("gone", 0): 2})
    assert offsets.restricted_to({("t", 0): object()}) == StreamOffsets({("t", 0): 1})
