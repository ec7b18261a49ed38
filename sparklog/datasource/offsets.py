"""``StreamOffsets``: a sparklog stream's position, the next offset of each topic partition.

It has two forms, and this is the one conversion between them:

- **nested**, Spark's Kafka source's JSON ``{"topic": {"0": 42}}``: what the stream reader
  returns to Spark, what Spark stores in the query's checkpoint (offset log) and reports
  as a source's ``startOffset``/``endOffset``/``latestOffset`` in the query's progress;
- **flat**, ``{("topic", 0): 42}``: what the read planner works with and what a Kafka
  OffsetCommit takes (``sparklog.kafka.admin.commit_offsets``).

A nested key holding ``':'`` is no topic (no topic name holds one): the source's report for
the listener rides in its reported latest offset under such a key
(``sparklog.datasource.group_offsets.REPORT_KEY``) and is never read as offsets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: a topic partition, as the read planner and the Kafka client name it
TopicPartition = tuple[str, int]
#: the nested form, as Spark keeps it (JSON object of JSON objects)
SparkOffsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class StreamOffsets:
    """The next offset of each topic partition of a stream (flat; see the module
    docstring). A value: equal when the positions are."""

    positions: Mapping[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def from_spark(cls, nested: Mapping[str, Any]) -> StreamOffsets:
        """The nested form (keys holding ``':'`` left out) as a position."""
        return cls(
            {
                (topic, int(p)): int(o)
                for topic, parts in nested.items()
                if ":" not in topic and isinstance(parts, Mapping)
                for p, o in parts.items()
            }
        )

    @classmethod
    def parse(cls, text: str) -> StreamOffsets:
        """The nested form as JSON text (a source's offsets in a query's progress).
        ``ValueError`` if ``text`` is not a JSON object."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"stream offsets must be a JSON object, got {text[:100]!r}")
        return cls.from_spark(doc)

    def to_spark(self) -> SparkOffsets:
        """The nested form, topics and partitions in order."""
        out: SparkOffsets = {}
        for (topic, p), o in sorted(self.positions.items()):
            out.setdefault(topic, {})[str(p)] = o
        return out

    def flat(self) -> dict[TopicPartition, int]:
        """The flat form, a copy the caller may change."""
        return dict(self.positions)

    def restricted_to(self, partitions: Mapping[TopicPartition, Any]) -> StreamOffsets:
        """Only the topic partitions among ``partitions``' keys."""
        return StreamOffsets({tp: o for tp, o in self.positions.items() if tp in partitions})
