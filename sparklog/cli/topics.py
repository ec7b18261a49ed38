"""``sparklog topics``: create, list, describe, alter and delete topics.

    sparklog topics create NAME [--partitions N] [--replication-factor N] [--config k=v ...]
        TARGET
    sparklog topics list TARGET
    sparklog topics describe NAME [--json] TARGET
    sparklog topics alter NAME [--config k=v ...] [--delete-config k ...] TARGET
    sparklog topics delete NAME TARGET

TARGET is ``--bootstrap-server HOST:PORT [--command-config FILE]`` (through a broker:
CreateTopics, DeleteTopics, Metadata, DescribeConfigs, IncrementalAlterConfigs,
ListOffsets) or ``--data-dir DIR`` (on storage directly, offline use; creating, altering or
deleting a topic takes the data-dir lease, so they refuse to run beside a broker that holds
it). ``describe`` prints Kafka's ``kafka-topics.sh --describe`` lines and sparklog's
offsets (``sparklog.cli.describe``), or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from sparklog.cli import describe
from sparklog.cli.arguments import add_command, add_connection_arguments, connect
from sparklog.cli.exits import ExitCode
from sparklog.storage import Storage
from sparklog.storage.lease import DATA_DIR

ACTIONS = {
    "create": "create a topic (through a broker, or offline in a storage root)",
    "list": "list the topics",
    "describe": "a topic's partitions, leaders, offsets and configs, as kafka-topics.sh "
    "--describe prints them (--json: JSON)",
    "alter": "set or reset a topic's configs",
    "delete": "delete a topic and its data",
}


def add_parser(sub: Any) -> None:
    """The ``topics`` command, on the top-level subparsers ``sub``."""
    topics = add_command(sub, "topics", "create, list, describe, alter and delete topics")
    tsub = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in ACTIONS.items():
        p = add_command(tsub, action, text)
        if action != "list":
            p.add_argument("name", help="the topic")
        if action == "describe":
            p.add_argument("--json", action="store_true", help="print JSON")
        if action == "create":
            p.add_argument("--partitions", type=int, default=1, help="how many (default 1)")
            p.add_argument(
                "--replication-factor",
                type=int,
                default=-1,
                metavar="N",
                help="1 or -1 (the default) on a local storage root: it is one copy",
            )
        if action in ("create", "alter"):
            p.add_argument(
                "--config",
                action="append",
                default=[],
                metavar="NAME=VALUE",
                help="a topic config (Kafka name), repeatable",
            )
        if action == "alter":
            p.add_argument(
                "--delete-config",
                action="append",
                default=[],
                metavar="NAME",
                help="return a config to its default, repeatable",
            )
        add_connection_arguments(p, required=False)
        p.add_argument("--data-dir", help="the storage root (offline use, no broker)")
        p.set_defaults(func=run)


def parse_configs(pairs: Sequence[str]) -> dict[str, str]:
    """``--config NAME=VALUE`` pairs as a mapping."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--config expects NAME=VALUE, got {pair!r}")
        out[name.strip()] = value.strip()
    return out


@contextlib.contextmanager
def _writer_lease(storage: Storage) -> Iterator[None]:
    """The data-dir lease, held while an offline command changes topics."""
    with storage.leases.acquire(DATA_DIR, "sparklog CLI"):
        yield


class Ticker:
    """Progress of an offline operation over many partitions, on stderr: nothing for the
    first ``quiet_s`` seconds (most runs), then a line at most every ``every_s``."""

    def __init__(self, label: str, quiet_s: float = 2.0, every_s: float = 2.0) -> None:
        import time

        self.label, self.every_s, self._clock = label, every_s, time.monotonic
        self._next = self._clock() + quiet_s

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now >= self._next and done < total:
            self._next = now + self.every_s
            print(f"{self.label}: {done:,} of {total:,} partitions", file=sys.stderr, flush=True)


def _remote(args: argparse.Namespace) -> int:
    from sparklog.kafka import admin as kc

    with connect(args) as c:
        if args.action == "create":
            kc.create_topic(
                c,
                args.name,
                args.partitions,
                parse_configs(args.config),
                args.replication_factor,
            )
            print(f"Created topic {args.name} with {args.partitions} partition(s).")
        elif args.action == "list":
            for name in kc.list_topics(c):
                print(name)
        elif args.action == "describe":
            describe.show(kc.describe_topic(c, args.name), as_json=args.json)
        elif args.action == "alter":
            kc.alter_topic_configs(c, args.name, parse_configs(args.config), args.delete_config)
            print(f"Altered configs of topic {args.name}.")
        elif args.action == "delete":
            kc.delete_topic(c, args.name)
            print(f"Deleted topic {args.name}.")
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    """``sparklog topics ACTION``, through a broker or on a storage root."""
    if (args.data_dir is None) == (args.bootstrap_server is None):
        raise ValueError("give exactly one of --bootstrap-server HOST:PORT or --data-dir DIR")
    if args.bootstrap_server:
        return _remote(args)
    if args.command_config is not None:
        raise ValueError("--command-config needs --bootstrap-server")
    storage = Storage(args.data_dir)
    if args.action != "create":
        storage.require()  # a create makes the storage; anything else needs it there
    if args.action == "create":
        from sparklog.broker.replicas import check_replication_factor

        check_replication_factor(
            args.replication_factor, redundant=storage.fs.redundant, live_brokers=None
        )
        with _writer_lease(storage):
            meta = storage.topics.create(args.name, args.partitions, parse_configs(args.config))
        print(f"Created topic {meta.name} with {meta.partitions} partition(s).")
    elif args.action == "list":
        for name in storage.topics.list():
            print(name)
    elif args.action == "describe":
        doc = describe.offline(storage, args.name, Ticker(f"describe {args.name}"))
        describe.show(doc, as_json=args.json)
    elif args.action == "alter":
        with _writer_lease(storage):
            storage.topics.alter_configs(args.name, parse_configs(args.config), args.delete_config)
        print(f"Altered configs of topic {args.name}.")
    elif args.action == "delete":
        with _writer_lease(storage):
            storage.topics.delete(args.name, progress=Ticker(f"delete {args.name}"))
        print(f"Deleted topic {args.name}.")
    return ExitCode.OK
