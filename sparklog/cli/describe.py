"""What ``sparklog topics describe`` prints: Kafka's ``kafka-topics.sh --describe`` lines,
or JSON with ``--json``.

The lines are Kafka's, so what reads Kafka's output reads these: fields ``Name: value``
separated by tabs; first the topic's (``Topic``, ``TopicId``, ``PartitionCount``,
``ReplicationFactor``, ``Configs``: ``name=value`` pairs joined by commas), then a line per
partition, starting with a tab (``Topic``, ``Partition``, ``Leader``, ``Replicas``, ``Isr``,
``Elr``, ``LastKnownElr``, and sparklog's ``LogStartOffset`` and ``HighWatermark``).

``TopicId`` is spelled as Kafka spells a Uuid (base64url, unpadded; the JSON has the hex
form), ``Configs`` are the ones not at Kafka's default (the topic's own and the cluster's
dynamic defaults), ``Leader: none`` is a partition without a live leader; sparklog keeps
no eligible leader replicas, so ``Elr`` and ``LastKnownElr`` are empty. After Kafka's
fields come sparklog's offsets: the log start offset and the high watermark. Offline
(``--data-dir``) there is no broker to lead a partition: the partition lines leave out
``Leader``, ``Replicas`` and ``Isr`` (and the first line the replication factor) and add
the segments and bytes on disk.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from typing import Any

from sparklog.errors import SparkLogError
from sparklog.storage import Storage
from sparklog.storage.reader import PartitionReader

Progress = Callable[[int, int], None]


def offline(storage: Storage, name: str, progress: Progress) -> dict[str, Any]:
    """The description of topic ``name`` from the storage root alone (no broker)."""
    meta = storage.topics.get(name)
    parts: list[dict[str, Any]] = []
    for p in range(meta.partitions):
        progress(p, meta.partitions)
        reader = PartitionReader(storage.fs, storage.root, name, p)
        try:
            view = reader.view()
        except SparkLogError:
            parts.append(
                {
                    "partition": p,
                    "log_start_offset": 0,
                    "high_watermark": 0,
                    "segments": 0,
                    "bytes": 0,
                }
            )
            continue
        m = view.manifest
        parts.append(
            {
                "partition": p,
                "log_start_offset": view.log_start_offset,
                "high_watermark": view.high_watermark,
                "segments": len(m.segments),
                "sealed_segments": sum(1 for s in m.segments if s.sealed),
                "bytes": sum(s.size_bytes for s in m.segments if not s.active) + view.hwm.position,
            }
        )
    strings = meta.config.strings()
    set_here = {*meta.own_configs, *storage.topics.defaults()}
    return {
        "topic": meta.name,
        "topic_id": meta.topic_id,
        "partitions": meta.partitions,
        "configs": meta.config.to_mapping(),
        "non_default_configs": {k: v for k, v in strings.items() if k in set_here},
        "partition_state": parts,
    }


def kafka_uuid(hex_id: str) -> str:
    """A topic id as Kafka prints a Uuid: the 16 bytes in base64url, without padding."""
    try:
        raw = uuid.UUID(hex=hex_id).bytes
    except ValueError:
        return hex_id
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _ids(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def lines(doc: dict[str, Any]) -> list[str]:
    """Kafka's describe lines for ``doc`` (a description from ``offline`` or
    ``sparklog.kafka.admin.describe_topic``)."""
    parts = doc["partition_state"]
    configs = doc.get("non_default_configs", {})
    head = [
        f"Topic: {doc['topic']}",
        f"TopicId: {kafka_uuid(doc['topic_id'])}",
        f"PartitionCount: {doc['partitions']}",
    ]
    if parts and "replicas" in parts[0]:  # Kafka's: the first partition's replica count
        head.append(f"ReplicationFactor: {len(parts[0]['replicas'])}")
    head.append("Configs: " + ",".join(f"{k}={v}" for k, v in configs.items()))
    out = ["\t".join(head)]
    for p in parts:
        fields = [f"Topic: {doc['topic']}", f"Partition: {p['partition']}"]
        if "leader" in p:
            leader = p["leader"] if p["leader"] >= 0 else "none"
            fields += [
                f"Leader: {leader}",
                f"Replicas: {_ids(p['replicas'])}",
                f"Isr: {_ids(p['isr'])}",
                "Elr: ",
                "LastKnownElr: ",
            ]
        fields += [
            f"LogStartOffset: {p['log_start_offset']}",
            f"HighWatermark: {p['high_watermark']}",
        ]
        if "segments" in p:
            fields += [f"Segments: {p['segments']}", f"Bytes: {p['bytes']}"]
        out.append("\t" + "\t".join(fields))
    return out


def show(doc: dict[str, Any], *, as_json: bool) -> None:
    """Print ``doc``: Kafka's lines, or JSON."""
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    for line in lines(doc):
        print(line)
