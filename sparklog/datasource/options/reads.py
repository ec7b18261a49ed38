"""The read options of ``format("sparklog")`` (``spark.read`` and ``readStream``): the
names of Spark's Kafka source. Unknown or contradictory options are errors that name the
option; typed keys and values are ``options.schemas``'.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.datasource.options.kafka import client_settings
from sparklog.datasource.options.schemas import (
    SCHEMA_OPTIONS,
    SchemaOptions,
    bool_option,
    schema_options,
)
from sparklog.errors import OptionError
from sparklog.kafka.client import ClientSettings
from sparklog.storage import names

EARLIEST = -2
LATEST = -1

# lower-cased names (Spark passes options case-insensitively)
_STREAM_ONLY = {"maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"}
_BATCH_OPTIONS = {
    "path",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "failondataloss",
    "includeheaders",
    "maxrecordsperpartition",
    "kafka.bootstrap.servers",
    "group",
}


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()

    @property
    def option(self) -> str:
        """The option that gave it, as the user wrote it."""
        return "assign" if self.assign else "subscribePattern" if self.pattern else "subscribe"

    def __str__(self) -> str:
        if self.assign:
            return "assign=" + ",".join(f"{t}-{p}" for t, p in self.assign)
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        return "subscribe=" + ",".join(self.topics)


@dataclass(frozen=True)
class Timestamps:
    """``startingTimestamp``/``endingTimestamp`` (one time for every partition) or
    ``...OffsetsByTimestamp`` (JSON ``{"topic": {"0": ms}}``; unlisted partitions take the
    default bound). A bound is the first offset whose timestamp is >= the time."""

    every: int | None = None
    by_partition: dict[str, dict[int, int]] | None = None

    def of(self, topic: str, partition: int) -> int | None:
        if self.by_partition is not None:
            return self.by_partition.get(topic, {}).get(partition)
        return self.every


@dataclass(frozen=True)
class BatchOptions:
    path: str
    subscription: Subscription
    starting: str | dict[str, dict[int, int]]
    ending: str | dict[str, dict[int, int]]
    starting_timestamps: Timestamps | None
    fail_on_data_loss: bool
    include_headers: bool
    max_records_per_partition: int
    ending_timestamps: Timestamps | None = None
    timestamp_strategy: str = "error"
    check_crcs: bool = True
    read_committed: bool = True
    #: the broker to ask for READ access (and, streaming, to commit a group through)
    client: ClientSettings | None = None
    #: typed keys and values (None: binary, as stored)
    schemas: SchemaOptions | None = None


def _isolation(opts: Mapping[str, str]) -> bool:
    """``kafka.isolation.level``: read_committed (sparklog's default: a read never shows
    aborted records or records past the last stable offset) or read_uncommitted."""
    raw = opts.get("kafka.isolation.level", "read_committed").strip().lower()
    if raw not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            f"option kafka.isolation.level must be read_committed or read_uncommitted, got {raw!r}"
        )
    return raw == "read_committed"


def _offsets(
    name: str, raw: str, allowed: tuple[str, ...], *, refused: dict[int, str] | None = None
) -> str | dict[str, dict[int, int]]:
    """``allowed`` words, or per-partition JSON whose offsets are >= 0, -2 (earliest) or -1
    (latest); ``refused`` maps -2/-1 to why this option cannot take it."""
    value = str(raw).strip()
    if value.lower() in allowed:
        return value.lower()
    try:
        doc = json.loads(value)
        out = {
            names.validate_topic_name(t): {int(p): int(o) for p, o in parts.items()}
            for t, parts in doc.items()
        }
    except (ValueError, AttributeError, TypeError) as e:
        raise OptionError(
            f"option {name} must be one of {list(allowed)} or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {raw!r} ({e})'
        ) from None
    for t, parts in out.items():
        for p, o in parts.items():
            if o < EARLIEST:
                raise OptionError(
                    f"option {name}: {t}-{p}: {o} is not an offset (use an offset >= 0, "
                    "-2 for earliest or -1 for latest)"
                )
            if refused and o in refused:
                raise OptionError(f"option {name}: {t}-{p}: {o} ({refused[o]})")
    return out


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _duration_ms(name: str, raw: str) -> int:
    """Spark-style durations: ``500ms``, ``30s``, ``15m``, ``1h`` (a bare number is ms)."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", raw)
    if not m:
        raise OptionError(f"option {name} must be a duration like 30s or 15m, got {raw!r}")
    return int(m.group(1)) * _UNITS_MS[m.group(2) or "ms"]


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options subscribe, subscribePattern and assign is required"
            + (f"; got {given}" if given else "")
        )
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe names no topic")
        for t in topics:
            names.validate_topic_name(t)
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"option subscribePattern is not a valid regex: {e}") from None
        return Subscription(pattern=raw)
    try:
        doc = json.loads(raw)
        pairs = tuple(
            (names.validate_topic_name(t), int(p)) for t, parts in doc.items() for p in parts
        )
    except (ValueError, AttributeError, TypeError) as e:
        raise OptionError(
            f'option assign must be JSON like {{"topicA":[0,1]}}, got {raw!r} ({e})'
        ) from None
    return Subscription(assign=pairs)


_BATCH_START_LATEST = "latest: a batch read from the latest offset reads nothing"
_BATCH_END_EARLIEST = "earliest: a batch read up to the earliest offset reads nothing"


def batch_options(options: Mapping[str, str]) -> BatchOptions:
    """The options of a batch read (``spark.read``); as Spark's Kafka source, a batch may
    not start at ``latest`` nor end at ``earliest``."""
    base = _parse(options, stream=False)
    if base.starting == "latest":
        raise OptionError(f"option startingOffsets={_BATCH_START_LATEST}; use earliest or offsets")
    return base


def _parse(options: Mapping[str, str], *, stream: bool) -> BatchOptions:
    opts = {k.lower(): str(v) for k, v in options.items()}
    unknown = sorted(
        k
        for k in opts
        if k not in _BATCH_OPTIONS and k not in SCHEMA_OPTIONS and not k.startswith("kafka.")
    )
    if unknown:
        raise OptionError(f"unknown option(s) {unknown} for format('sparklog')")
    if not opts.get("path"):
        raise OptionError("option path (the sparklog storage root) is required")
    raw_start = opts.get("startingoffsets", "earliest")
    if raw_start.strip().lower() == "group":
        raw_start = "earliest"  # resolved by the stream reader through the broker
    refused_start = None if stream else {LATEST: _BATCH_START_LATEST}
    starting = _offsets("startingOffsets", raw_start, ("earliest", "latest"), refused=refused_start)
    ending = _offsets(
        "endingOffsets",
        opts.get("endingoffsets", "latest"),
        ("latest",),
        refused={EARLIEST: _BATCH_END_EARLIEST},
    )
    try:
        per_partition = int(opts.get("maxrecordsperpartition", 1_000_000))
    except ValueError as e:
        raise OptionError(f"option maxRecordsPerPartition is not an integer: {e}") from None
    if per_partition < 1:
        raise OptionError("option maxRecordsPerPartition must be >= 1")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    subscription = _subscription(opts)
    return BatchOptions(
        path=opts["path"],
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_timestamps=_timestamps(opts, "starting"),
        fail_on_data_loss=bool_option("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=bool_option("includeHeaders", opts.get("includeheaders", "false")),
        max_records_per_partition=per_partition,
        ending_timestamps=_timestamps(opts, "ending"),
        timestamp_strategy=strategy,
        check_crcs=bool_option("kafka.check.crcs", opts.get("kafka.check.crcs", "true")),
        read_committed=_isolation(opts),
        client=client_settings(opts, "sparklog-source"),
        schemas=schema_options(opts, _topics(subscription), str(subscription)),
    )


def read_schema_options(options: Mapping[str, str]) -> SchemaOptions | None:
    """The typed-column options of a read (batch or stream), alone."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    subscription = _subscription(opts)
    return schema_options(opts, _topics(subscription), str(subscription))


def _topics(subscription: Subscription) -> tuple[str, ...] | None:
    """The topics a subscription names (None: a pattern)."""
    if subscription.pattern is not None:
        return None
    if subscription.assign:
        return tuple(sorted({t for t, _ in subscription.assign}))
    return subscription.topics


def _timestamps(opts: Mapping[str, str], which: str) -> Timestamps | None:
    """``<which>Timestamp`` or ``<which>OffsetsByTimestamp``; at most one of those and
    ``<which>Offsets`` may be given."""
    names_ = [f"{which}Offsets", f"{which}Timestamp", f"{which}OffsetsByTimestamp"]
    given = [n for n in names_ if n.lower() in opts]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(given)} contradict each other: give one")
    if f"{which}timestamp" in opts:
        raw = opts[f"{which}timestamp"]
        try:
            return Timestamps(every=int(raw))
        except ValueError:
            raise OptionError(
                f"option {which}Timestamp must be milliseconds since the epoch, got {raw!r}"
            ) from None
    by_ts = opts.get(f"{which}offsetsbytimestamp")
    if by_ts is None:
        return None
    try:
        doc = json.loads(by_ts)
        by = {
            names.validate_topic_name(t): {int(p): int(ms) for p, ms in parts.items()}
            for t, parts in doc.items()
        }
    except (ValueError, AttributeError, TypeError) as e:
        raise OptionError(
            f"option {which}OffsetsByTimestamp must be JSON like "
            f'{{"topic":{{"0":1700000000000}}}}, got {by_ts!r} ({e})'
        ) from None
    return Timestamps(by_partition=by)


@dataclass(frozen=True)
class StreamOptions:
    path: str
    subscription: Subscription
    starting: str | dict[str, dict[int, int]]
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    max_records_per_partition: int
    group: str | None
    client: ClientSettings | None
    starting_timestamps: Timestamps | None = None
    timestamp_strategy: str = "error"
    check_crcs: bool = True
    read_committed: bool = True
    schemas: SchemaOptions | None = None


def stream_options(options: Mapping[str, str]) -> StreamOptions:
    opts = {k.lower(): str(v) for k, v in options.items()}
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if name.lower() in opts:
            raise OptionError(f"option {name} is for batch reads; a stream has no end")
    rest = {k: v for k, v in opts.items() if k not in _STREAM_ONLY}
    base = _parse(rest, stream=True)
    starting: str | dict[str, dict[int, int]] = base.starting
    if opts.get("startingoffsets", "").strip().lower() == "group":
        starting = "group"
    elif "startingoffsets" not in opts:
        starting = "latest"  # Spark's Kafka source starts streams at the latest offsets
    max_offsets = None
    if "maxoffsetspertrigger" in opts:
        try:
            max_offsets = int(opts["maxoffsetspertrigger"])
        except ValueError:
            raise OptionError("option maxOffsetsPerTrigger must be an integer") from None
        if max_offsets < 1:
            raise OptionError("option maxOffsetsPerTrigger must be >= 1")
    min_offsets = None
    if "minoffsetspertrigger" in opts:
        try:
            min_offsets = int(opts["minoffsetspertrigger"])
        except ValueError:
            raise OptionError("option minOffsetsPerTrigger must be an integer") from None
        if min_offsets < 1:
            raise OptionError("option minOffsetsPerTrigger must be >= 1")
        if max_offsets is not None and min_offsets > max_offsets:
            raise OptionError("option minOffsetsPerTrigger exceeds maxOffsetsPerTrigger")
    if "maxtriggerdelay" in opts and min_offsets is None:
        raise OptionError("option maxTriggerDelay needs minOffsetsPerTrigger")
    delay_ms = _duration_ms("maxTriggerDelay", opts.get("maxtriggerdelay", "15m"))
    group = opts.get("group")
    bootstrap = opts.get("kafka.bootstrap.servers")
    client = base.client
    if starting == "group" and not (group and bootstrap):
        raise OptionError(
            "startingOffsets=group needs the options group and kafka.bootstrap.servers"
        )
    if group and not bootstrap:
        raise OptionError(
            "option group needs kafka.bootstrap.servers (commits go through the broker)"
        )
    return StreamOptions(
        base.path,
        base.subscription,
        starting,
        base.fail_on_data_loss,
        base.include_headers,
        max_offsets,
        min_offsets,
        delay_ms,
        base.max_records_per_partition,
        group,
        client,
        base.starting_timestamps,
        base.timestamp_strategy,
        base.check_crcs,
        base.read_committed,
        base.schemas,
    )
