"""``sparklog groups``: consumer groups through a broker.

    sparklog groups list|describe GROUP|delete GROUP --bootstrap-server HOST:PORT
    sparklog groups reset-offsets GROUP --topic T (--to-earliest | --to-latest |
        --to-offset N | --to-datetime ISO | --shift-by N) [--dry-run | --execute]
        --bootstrap-server HOST:PORT

``describe`` shows, per partition, the owner, committed offset, log end offset, lag in
records, lag in seconds (the age of the oldest unconsumed record) and the lag status
(Burrow's OK, WARN, REWIND, STALL, STOP) from the coordinator's ``/metrics``
(``sparklog.kafka.lag_status``); a status is extra, so a coordinator that serves no
metrics, or cannot be reached there, leaves it unknown (``-``). ``reset-offsets`` follows
Kafka's tool: it prints the new offsets, and commits them only with ``--execute``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sparklog.cli.arguments import add_command, add_connection_arguments, connect
from sparklog.cli.exits import ExitCode
from sparklog.errors import KafkaRequestError
from sparklog.kafka.client import KafkaClient

if TYPE_CHECKING:
    from sparklog.kafka.lag_status import GroupStatus

log = logging.getLogger(__name__)

ACTIONS = {
    "list": "list the consumer groups and their states",
    "describe": "a group's members, committed offsets and lag per partition",
    "delete": "delete a group with no active members (and its committed offsets)",
    "reset-offsets": "plan, and with --execute commit, new offsets for a group's topic",
}
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. "
    "Add --dry-run to keep this behaviour without the warning, or --execute to reset."
)


def add_parser(sub: Any) -> None:
    """The ``groups`` command, on the top-level subparsers ``sub``."""
    groups = add_command(sub, "groups", "consumer groups: list, describe (lag), delete, reset")
    gsub = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in ACTIONS.items():
        g = add_command(gsub, action, text)
        if action != "list":
            g.add_argument("group", help="the group id")
        if action == "describe":
            g.add_argument("--json", action="store_true", help="print JSON")
        if action == "reset-offsets":
            g.add_argument("--topic", required=True, help="the topic whose offsets move")
            to = g.add_mutually_exclusive_group(required=True)
            to.add_argument("--to-earliest", action="store_true", help="the log start offsets")
            to.add_argument("--to-latest", action="store_true", help="the log end offsets")
            to.add_argument("--to-offset", type=int, help="this offset (within the log)")
            to.add_argument("--to-datetime", metavar="ISO", help="e.g. 2026-11-21T10:00:00Z")
            to.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N")
            run_mode = g.add_mutually_exclusive_group()
            run_mode.add_argument(
                "--dry-run", action="store_true", help="print the new offsets (the default)"
            )
            run_mode.add_argument("--execute", action="store_true", help="commit them")
        add_connection_arguments(g, required=True)
        g.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``sparklog groups ACTION`` through the broker of ``--bootstrap-server``."""
    from sparklog.kafka import admin as kc

    with connect(args) as c:
        if args.action == "list":
            for group, state in kc.list_groups(c):
                print(f"{group}\t{state}")
        elif args.action == "describe":
            _describe(c, args)
        elif args.action == "delete":
            kc.delete_group(c, args.group)
            print(f"Deleted group {args.group}.")
        elif args.action == "reset-offsets":
            _reset_offsets(c, args)
    return ExitCode.OK


def lag_status(client: KafkaClient, group: str) -> GroupStatus | None:
    """The lag status of ``group``, or None when its coordinator has none to give or
    cannot be reached for it (logged at INFO: the rest of ``describe`` stands)."""
    from sparklog.kafka.lag_status import read_group_status

    try:
        return read_group_status(client, group)
    except Exception as e:  # a status is extra: no DESCRIBE_CONFIGS, no route, a bad text
        log.info("no lag status for group %s: %s", group, e)
        return None


def _describe(c: KafkaClient, args: argparse.Namespace) -> None:
    import time

    from sparklog.kafka import admin as kc

    doc = kc.describe_group(c, args.group, int(time.time() * 1000))
    health = lag_status(c, args.group)
    doc["status"] = health.status if health else None
    for r in doc["partitions"]:
        key = (r["topic"], r["partition"])
        r["status"] = health.partitions.get(key) if health else None
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    status = f", lag status {doc['status']}" if doc["status"] else ""
    print(f"group {doc['group']} ({doc['state']}, {len(doc['members'])} members{status})")
    header = ("TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "LAG-SECONDS", "STATUS", "OWNER")
    print("\t".join(header))
    for r in doc["partitions"]:
        secs = "-" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f}"
        committed = "-" if r["committed_offset"] is None else str(r["committed_offset"])
        row = [
            r["topic"],
            str(r["partition"]),
            committed,
            str(r["log_end_offset"]),
            str(r["lag"]),
            secs,
            r["status"] or "-",
            r["owner"] or "-",
        ]
        print("\t".join(row))


def _reset_offsets(c: KafkaClient, args: argparse.Namespace) -> None:
    """Kafka's ``kafka-consumer-groups --reset-offsets``: plan the new offsets of one topic,
    print them, and commit them only with ``--execute`` (the default is a dry run). The group
    must have no active members, also for a dry run."""
    from sparklog.kafka import admin as kc

    state, members = kc.group_state(c, args.group)
    if members:
        raise KafkaRequestError(
            f"reset offsets of {args.group!r}",
            ErrorCode.unknown_member_id,
            f"the group is {state} with {members} active members: stop its consumers first",
        )
    parts = kc.topic_partitions(c, args.topic)
    starts = {p: o for p, (o, _ts) in kc.list_offsets(c, args.topic, parts, -2).items()}
    ends = {p: o for p, (o, _ts) in kc.list_offsets(c, args.topic, parts, -1).items()}

    def clamp(offset: int, p: int) -> int:  # as Kafka's tool: within [log start, log end]
        return min(max(offset, starts[p]), ends[p])

    if args.to_earliest:
        targets = dict(starts)
    elif args.to_latest:
        targets = dict(ends)
    elif args.to_offset is not None:
        if args.to_offset < 0:
            raise ValueError("--to-offset must not be negative")
        targets = {p: clamp(args.to_offset, p) for p in parts}
    elif args.shift_by is not None:
        committed = kc.committed_offsets(c, args.group)
        missing = [p for p in parts if (args.topic, p) not in committed]
        if missing:
            raise ValueError(
                f"--shift-by: {args.topic} partitions {missing} have no committed offset "
                f"in group {args.group!r} to shift"
            )
        targets = {p: clamp(committed[(args.topic, p)] + args.shift_by, p) for p in parts}
    else:
        ms = _datetime_ms(args.to_datetime)
        found = kc.list_offsets(c, args.topic, parts, ms)
        targets = {p: o if o >= 0 else ends[p] for p, (o, _ts) in found.items()}
    if args.execute:
        kc.commit_offsets(c, args.group, {(args.topic, p): o for p, o in targets.items()})
    elif not args.dry_run:
        print(DRY_RUN_WARNING, file=sys.stderr)
    for p, o in sorted(targets.items()):
        print(f"{args.group}\t{args.topic}\t{p}\t{o}")


def _datetime_ms(value: str) -> int:
    from datetime import datetime

    try:
        when = datetime.fromisoformat(value)
    except ValueError as e:
        raise ValueError(
            f"--to-datetime {value!r} is not an ISO date and time, e.g. 2026-11-21T10:00:00Z ({e})"
        ) from None
    if when.tzinfo is None:
        raise ValueError("--to-datetime needs a time zone, e.g. 2026-11-21T10:00Z")
    return int(when.timestamp() * 1000)
