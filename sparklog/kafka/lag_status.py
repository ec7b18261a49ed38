"""A consumer group's lag status (Burrow's OK, WARN, REWIND, STALL, STOP:
``sparklog.broker.observability.lag``), as its coordinator reports it.

The status needs a window of samples, which only the broker that coordinates the group
keeps; it reports them in ``/metrics`` (``sparklog_consumergroup_status``,
``sparklog_consumergroup_partition_status``). So ``sparklog groups describe`` finds the
coordinator (FindCoordinator), asks it where it serves ``/metrics`` (DescribeConfigs of
the broker, ``sparklog.metrics.url``), and reads the status there. A broker without
``--metrics`` has none to give: the status is then unknown (None). What to do when the
status cannot be read is the caller's (``sparklog groups describe`` leaves it unknown:
``sparklog.cli.groups``).
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from sparklog.kafka import admin
from sparklog.kafka.client import KafkaClient
from sparklog.kafka.wire import ApiKey


@dataclass(frozen=True)
class GroupStatus:
    """The group's status (its worst partition's) and each committed partition's."""

    status: str
    partitions: dict[tuple[str, int], str] = field(default_factory=dict)


def metrics_url(client: KafkaClient, group: str) -> str | None:
    """Where the coordinator of ``group`` serves ``/metrics`` (None: it does not)."""
    found = client.request(
        ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]}
    ).coordinators[0]
    if found.error_code != ErrorCode.none:
        return None
    with KafkaClient(client.settings.with_bootstrap(f"{found.host}:{found.port}")) as there:
        key = admin.METRICS_URL_CONFIG
        return admin.broker_configs(there, [key]).get(key)


def parse(text: str, group: str) -> GroupStatus | None:
    """The status of ``group`` in a ``/metrics`` exposition (None: not there)."""
    from prometheus_client.parser import text_string_to_metric_families

    status = None
    partitions: dict[tuple[str, int], str] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "sparklog_consumergroup_status":
            for s in family.samples:
                if s.labels.get("consumergroup") == group and s.value == 1:
                    status = s.labels["status"]
        elif family.name == "sparklog_consumergroup_partition_status":
            for s in family.samples:
                if s.labels.get("consumergroup") == group and s.value == 1:
                    key = (s.labels["topic"], int(s.labels["partition"]))
                    partitions[key] = s.labels["status"]
    return None if status is None else GroupStatus(status, partitions)


def read_group_status(
    client: KafkaClient, group: str, timeout_s: float = 10.0
) -> GroupStatus | None:
    """The status of ``group`` from its coordinator's ``/metrics``; None if the
    coordinator serves no metrics or reports no status for the group. Raises what reading
    them raises (the coordinator or its ``/metrics`` out of reach, a text that is not an
    exposition)."""
    url = metrics_url(client, group)
    if url is None:
        return None
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        text = resp.read().decode()
    return parse(text, group)
