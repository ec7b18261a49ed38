"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs.

Config changes apply to topics (Kafka's names and ranges, ``sparklog.storage.config``):
AlterConfigs replaces a topic's configs with the ones given (the rest return to their
defaults); IncrementalAlterConfigs sets, deletes (back to the default), or appends to and
subtracts from the list config ``cleanup.policy``. On the *default* broker resource (name
"", ``kafka-configs --entity-type brokers --entity-default``) they change the cluster-wide
dynamic defaults of topic configs, by Kafka's broker names (``log.retention.ms``...,
``BROKER_TOPIC_DEFAULTS``): every topic that does not set the config itself follows at
once, as in Kafka (``TopicStore.set_defaults``). Per-broker values are refused (brokers
share one storage, so a default is the cluster's), and so are the other broker settings:
they are static (the TOML file), and INVALID_REQUEST names it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from sparklog.broker.context import RequestContext
from sparklog.broker.errors import error_code
from sparklog.broker.replicas import check_replication_factor
from sparklog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    ReplicaAssignmentError,
    SparkLogError,
    StaticBrokerConfigError,
    TopicAuthorizationError,
    TopicExistsError,
    UnsupportedResourceTypeError,
)
from sparklog.kafka.admin import METRICS_URL_CONFIG
from sparklog.schemas.model import REGISTRY_URL_CONFIG
from sparklog.security.acls import AclOperation as Op
from sparklog.security.acls import ResourceType as RT
from sparklog.storage import names
from sparklog.storage.config import TopicConfig
from sparklog.storage.topics import TopicMeta

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_DYNAMIC_DEFAULT = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
SOURCE_STATIC = 4  # STATIC_BROKER_CONFIG
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
#: Kafka's broker-level defaults of topic configs -> the topic configs they default
BROKER_TOPIC_DEFAULTS = {
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    "compression.type": "compression.type",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
}
_TOPIC_TO_BROKER = {v: k for k, v in BROKER_TOPIC_DEFAULTS.items()}
_TYPE_STRING, _TYPE_INT, _TYPE_LONG, _TYPE_DOUBLE, _TYPE_LIST = 2, 3, 5, 6, 7
_CONFIG_TYPES = {
    "cleanup.policy": _TYPE_LIST,
    "compression.type": _TYPE_STRING,
    "message.timestamp.type": _TYPE_STRING,
    "segment.bytes": _TYPE_INT,
    "max.message.bytes": _TYPE_INT,
    "index.interval.bytes": _TYPE_INT,
    "min.cleanable.dirty.ratio": _TYPE_DOUBLE,
}


def _config_entries(
    meta: TopicMeta, keys: Any, dynamic: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    explicit = meta.own_configs
    dynamic = dynamic or {}
    out = []
    for name, value in meta.config.strings().items():
        if keys and name not in keys:
            continue
        out.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": (
                    SOURCE_TOPIC
                    if name in explicit
                    else SOURCE_DYNAMIC_DEFAULT
                    if name in dynamic
                    else SOURCE_DEFAULT
                ),
                "is_default": name not in explicit and name not in dynamic,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": _CONFIG_TYPES.get(name, _TYPE_LONG),
                "documentation": None,
            }
        )
    return out


async def create_topics(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    out = []
    for t in req.topics:
        entry: dict[str, Any] = {
            "name": t.name,
            "topic_id": uuid.UUID(int=0),
            "error_code": ErrorCode.none,
            "error_message": None,
            "topic_config_error_code": 0,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        try:
            if not ctx.may_create_topic(t.name):
                raise TopicAuthorizationError(f"{ctx.principal} may not CREATE topic {t.name!r}")
            names.validate_topic_name(t.name)
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            partitions = int(t.num_partitions)
            asked = int(t.replication_factor)
            if t.assignments:
                if partitions != -1 or asked != -1:
                    raise ValueError(
                        "give num_partitions and replication_factor -1 with replica assignments"
                    )
                partitions = _check_assignments(
                    ctx, [(int(a.partition_index), list(a.broker_ids)) for a in t.assignments], 0
                )
                asked = len(t.assignments[0].broker_ids)
            factor = check_replication_factor(
                asked, redundant=ctx.manager.storage.fs.redundant, live_brokers=_live(ctx)
            )
            if partitions == 0 or partitions < -1:
                raise InvalidPartitionsError(f"num_partitions {partitions} must be positive")
            if req.validate_only:
                TopicConfig.from_mapping({**ctx.manager.config.topic_defaults, **configs})
                if ctx.manager.topics().get(t.name) is not None:
                    raise TopicExistsError(f"topic {t.name!r} already exists")
                meta = None
            else:
                meta = ctx.manager.create_topic(t.name, partitions, configs)
            if meta is not None:
                entry.update(
                    topic_id=uuid.UUID(meta.topic_id),
                    num_partitions=meta.partitions,
                    replication_factor=factor,
                    configs=[
                        {
                            "name": c["name"],
                            "value": c["value"],
                            "read_only": False,
                            "config_source": c["config_source"],
                            "is_sensitive": False,
                        }
                        for c in _config_entries(meta, None)
                    ],
                )
        except (SparkLogError, ValueError) as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        out.append(entry)
    return {"throttle_time": 0, "topics": out}


def _live(ctx: RequestContext) -> int:
    """How many brokers are live: Kafka's bound on a replication factor."""
    return len(ctx.cluster.view.brokers) if ctx.cluster is not None else 1


def _check_assignments(
    ctx: RequestContext, assignments: list[tuple[int, list[int]]], first: int
) -> int:
    """Kafka's checks of explicit replica assignments (partitions ``first``.. in order, each
    a non-empty list of distinct existing brokers, all of one length); the partition count
    they give. The brokers named are where the partition may be led: the data is on shared
    storage, so an assignment places no bytes, and in cluster mode the controller picks
    the leader among the live brokers (docs/kafka-apis.md)."""
    known = set(ctx.cluster.view.brokers) if ctx.cluster is not None else {ctx.node_id}
    lengths = set()
    for i, (index, brokers) in enumerate(sorted(assignments)):
        if index != first + i:
            raise ReplicaAssignmentError(
                f"partition {index} is out of order (expected {first + i})"
            )
        if not brokers or len(set(brokers)) != len(brokers):
            raise ReplicaAssignmentError(
                f"partition {index}: replicas {brokers} are empty or repeat"
            )
        unknown = sorted(set(brokers) - known)
        if unknown:
            raise ReplicaAssignmentError(
                f"partition {index}: brokers {unknown} do not exist (brokers: {sorted(known)})"
            )
        lengths.add(len(brokers))
    if len(lengths) > 1:
        raise ReplicaAssignmentError("every partition must have the same number of replicas")
    return len(assignments)


async def delete_topics(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    out = []
    for name in req.topic_names:
        entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.none, "error_message": None}
        try:
            ctx.require(Op.DELETE, RT.TOPIC, name)
            if ctx.cluster is not None:  # logged and handed back as any other give-up
                await ctx.cluster.give_up_topic(name)
            ctx.manager.delete_topic(name)
            if ctx.services.metrics is not None:
                ctx.services.metrics.forget_topic(name)
        except (SparkLogError, ValueError) as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        out.append(entry)
    return {"throttle_time": 0, "responses": out}


async def create_partitions(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    out = []
    for t in req.topics:
        entry: dict[str, Any] = {
            "name": t.name,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        try:
            ctx.require(Op.ALTER, RT.TOPIC, t.name)
            meta = ctx.manager.topic(t.name)
            if t.assignments:
                if len(t.assignments) != int(t.count) - meta.partitions:
                    raise ReplicaAssignmentError(
                        f"{len(t.assignments)} replica assignments for "
                        f"{int(t.count) - meta.partitions} new partitions"
                    )
                _check_assignments(
                    ctx,
                    [
                        (meta.partitions + i, list(a.broker_ids))
                        for i, a in enumerate(t.assignments)
                    ],
                    meta.partitions,
                )
            if req.validate_only:
                if int(t.count) <= meta.partitions:
                    raise InvalidPartitionsError(f"partitions must grow beyond {meta.partitions}")
            else:
                ctx.manager.add_partitions(t.name, int(t.count))
        except (SparkLogError, ValueError) as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        out.append(entry)
    return {"throttle_time": 0, "results": out}


async def describe_configs(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    results = []
    for r in req.resources:
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        try:
            _require_configs(ctx, Op.DESCRIBE_CONFIGS, r)
            if r.resource_type == TOPIC_RESOURCE:
                meta = ctx.manager.topic(r.resource_name)
                dynamic = ctx.manager.storage.topics.defaults()
                entry["configs"] = _config_entries(meta, r.configuration_keys, dynamic)
            elif r.resource_type == BROKER_RESOURCE:
                cfg = ctx.manager.config
                broker = {
                    "broker.id": str(cfg.node_id),
                    "auto.create.topics.enable": str(cfg.auto_create_topics).lower(),
                    "num.partitions": str(cfg.num_partitions),
                    "socket.request.max.bytes": str(cfg.socket_request_max_bytes),
                }
                registry = ctx.services.registry
                if registry is not None and registry.url is not None:
                    # Confluent Server's name: where Spark's sink finds the registry
                    broker[REGISTRY_URL_CONFIG] = registry.url
                metrics = ctx.services.metrics
                if metrics is not None and metrics.url is not None:
                    # where `sparklog groups describe` reads the lag status
                    broker[METRICS_URL_CONFIG] = metrics.url
                rows = [(k, v, True, SOURCE_STATIC) for k, v in broker.items()]
                rows += [
                    (_TOPIC_TO_BROKER[k], str(v), False, SOURCE_DYNAMIC_DEFAULT)
                    for k, v in sorted(ctx.manager.storage.topics.defaults().items())
                    if k in _TOPIC_TO_BROKER
                ]
                entry["configs"] = [
                    {
                        "name": k,
                        "value": v,
                        "read_only": read_only,
                        "config_source": source,
                        "is_sensitive": False,
                        "synonyms": [],
                        "config_type": _TYPE_STRING,
                        "documentation": None,
                    }
                    for k, v, read_only, source in rows
                    if not r.configuration_keys or k in r.configuration_keys
                ]
            else:
                raise UnsupportedResourceTypeError(
                    f"resource type {r.resource_type} is not supported"
                )
        except (SparkLogError, ValueError) as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        results.append(entry)
    return {"throttle_time": 0, "results": results}


OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_LIST_CONFIGS = {"cleanup.policy"}
BROKER_LISTS = {"log.cleanup.policy"}


def _require_configs(ctx: RequestContext, op: Op, r: Any) -> None:
    """DESCRIBE_CONFIGS or ALTER_CONFIGS on the topic, or on the cluster for a broker."""
    if int(r.resource_type) == TOPIC_RESOURCE:
        ctx.require(op, RT.TOPIC, r.resource_name)
    elif int(r.resource_type) == BROKER_RESOURCE:
        ctx.require(op, RT.CLUSTER)


def _alter_entry(r: Any) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
    }


def _check_alterable(r: Any) -> None:
    """Refuse what cannot be altered (see the module docstring)."""
    if r.resource_type == TOPIC_RESOURCE:
        return
    if r.resource_type == BROKER_RESOURCE and r.resource_name == "":
        static = sorted(c.name for c in r.configs if c.name not in BROKER_TOPIC_DEFAULTS)
        if static:
            raise StaticBrokerConfigError(
                f"broker configs {static} are static: edit the broker's TOML file (--config) "
                f"and restart; dynamic: {sorted(BROKER_TOPIC_DEFAULTS)}"
            )
    elif r.resource_type == BROKER_RESOURCE:
        raise StaticBrokerConfigError(
            "per-broker configs are static (the broker's TOML file); topic defaults such as "
            "log.retention.ms are cluster-wide: set them with --entity-default"
        )
    else:
        raise UnsupportedResourceTypeError(f"resource type {r.resource_type} is not supported")


def _unique_names(r: Any) -> list[str]:
    names_ = [c.name for c in r.configs]
    dup = sorted({n for n in names_ if names_.count(n) > 1})
    if dup:
        raise InvalidConfigError(f"configs {dup} are given more than once")
    return names_


#: how one resource of an alter request changes its topic: (sets, deletes, replace)
ConfigChange = Callable[[Any], tuple[dict[str, str], list[str], bool]]


def _alter_each(ctx: RequestContext, req: Any, change: ConfigChange) -> dict[str, Any]:
    """Apply ``change`` to every resource of an (Incremental)AlterConfigs request, one
    error entry per resource."""
    out = []
    for r in req.resources:
        entry = _alter_entry(r)
        try:
            _check_alterable(r)
            _require_configs(ctx, Op.ALTER_CONFIGS, r)
            _unique_names(r)
            sets, deletes, replace = change(r)
            validate_only = bool(req.validate_only)
            if r.resource_type == BROKER_RESOURCE:
                ctx.manager.storage.topics.set_defaults(
                    {BROKER_TOPIC_DEFAULTS[k]: v for k, v in sets.items()},
                    [BROKER_TOPIC_DEFAULTS[k] for k in deletes],
                    replace=replace,
                    validate_only=validate_only,
                )
                if not validate_only:
                    ctx.manager.sync_topics()  # open logs follow at once
            else:
                ctx.manager.alter_configs(
                    r.resource_name,
                    sets,
                    deletes,
                    replace=replace,
                    validate_only=validate_only,
                )
        except (SparkLogError, ValueError) as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        out.append(entry)
    return {"throttle_time": 0, "responses": out}


async def alter_configs(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """AlterConfigs: the given configs replace the topic's (absent ones return to defaults)."""
    return _alter_each(
        ctx, req, lambda r: ({c.name: c.value for c in r.configs if c.value is not None}, [], True)
    )


def _incremental(
    current: dict[str, str], ops: Any, lists: set[str]
) -> tuple[dict[str, str], list[str]]:
    """The sets and deletes of IncrementalAlterConfigs operations on ``current`` configs
    (``lists``: the list configs APPEND and SUBTRACT apply to)."""
    sets: dict[str, str] = {}
    deletes: list[str] = []
    for c in ops:
        op = int(c.config_operation)
        if op == OP_SET:
            if c.value is None:
                raise InvalidConfigError(f"config {c.name!r}: SET needs a value")
            sets[c.name] = c.value
        elif op == OP_DELETE:
            deletes.append(c.name)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if c.name not in lists:
                raise InvalidConfigError(
                    f"config {c.name!r} is not a list: APPEND and SUBTRACT apply to {sorted(lists)}"
                )
            items = [v for v in current.get(c.name, "").split(",") if v]
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if op == OP_APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            if not items:
                raise InvalidConfigError(f"config {c.name!r} cannot become empty")
            sets[c.name] = ",".join(items)
        else:
            raise InvalidConfigError(f"config {c.name!r}: unknown operation {op}")
    return sets, deletes


async def incremental_alter_configs(ctx: RequestContext, header: Any, req: Any) -> dict[str, Any]:
    """IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT on the topic's configs."""

    def change(r: Any) -> tuple[dict[str, str], list[str], bool]:
        if r.resource_type == BROKER_RESOURCE:
            dynamic = ctx.manager.storage.topics.defaults()
            current = {_TOPIC_TO_BROKER[k]: str(v) for k, v in dynamic.items()}
            return (*_incremental(current, r.configs, BROKER_LISTS), False)
        meta = ctx.manager.topic(r.resource_name)
        current = meta.config.strings()
        return (*_incremental(current, r.configs, _LIST_CONFIGS), False)

    return _alter_each(ctx, req, change)
