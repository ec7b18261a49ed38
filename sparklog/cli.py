"""The ``sparklog`` command line.

    sparklog --version
    sparklog broker start [--data-dir DIR] [--listen HOST:PORT] [--config FILE]
    sparklog topics create NAME [--partitions N] [--replication-factor N] [--config k=v ...]
        TARGET
    sparklog topics list TARGET
    sparklog topics describe NAME [--json] TARGET
    sparklog topics alter NAME [--config k=v ...] [--delete-config k ...] TARGET
    sparklog topics delete NAME TARGET

    sparklog groups list|describe GROUP|delete GROUP --bootstrap-server HOST:PORT
    sparklog groups reset-offsets GROUP --topic T (--to-earliest | --to-latest |
        --to-offset N | --to-datetime ISO | --shift-by N) [--dry-run | --execute]
        --bootstrap-server HOST:PORT

    sparklog users add|list|delete ...   sparklog acls list|add|remove ...
        (see ``sparklog.cli_security``)

    sparklog cluster describe --etcd HOST:PORT[,...] [--cluster NAME] [--json]
        [--etcd-ca-file F] [--etcd-cert-file F --etcd-key-file F]
        [--etcd-user U [--etcd-password-file F]]
    sparklog scheduler --data-dir DIR [--spark-args "ARGS"] [--min-interval S]
        [--max-interval S] [--max-jobs N] [--spark-submit PATH]

TARGET is ``--bootstrap-server HOST:PORT [--command-config FILE]`` or ``--data-dir DIR``;
every ``--bootstrap-server`` takes ``--command-config``, a properties file of Kafka client
security settings as Kafka's tools take (``security.protocol``, ``sasl.*``, ``ssl.*``).
``topics describe`` prints Kafka's ``kafka-topics.sh --describe`` lines and sparklog's
offsets (``sparklog.cli_describe``), or JSON with ``--json``.
``groups describe`` shows, per partition, the owner, committed offset, log end offset, lag
in records, lag in seconds (the age of the oldest unconsumed record) and the lag status
(Burrow's OK, WARN, REWIND, STALL, STOP; from the coordinator's ``/metrics``, when it
serves them: ``sparklog.kafka.lag_status``).
``groups reset-offsets`` follows Kafka's tool: it prints the new offsets, and commits them
only with ``--execute``.

``--bootstrap-server`` goes through a broker (CreateTopics, DeleteTopics, Metadata,
DescribeConfigs, IncrementalAlterConfigs, ListOffsets). The ``--data-dir`` forms work on
storage directly (offline use); creating, altering or deleting a topic takes the data-dir
lease, so they refuse to run beside a broker that holds it.
Errors print one line on stderr and exit with status 2 (bad arguments) or 1 (other).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

import sparklog
from sparklog import cli_describe
from sparklog.cli_security import add_command, add_connection_arguments, add_parsers, connect
from sparklog.errors import KafkaRequestError, SparkLogError
from sparklog.kafka.client import KafkaClient
from sparklog.storage import Storage
from sparklog.storage.lease import DATA_DIR

if TYPE_CHECKING:
    from sparklog.broker.config import BrokerConfig


def _parse_configs(pairs: Sequence[str]) -> dict[str, str]:
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


class _Ticker:
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


def _topics_remote(args: argparse.Namespace) -> int:
    from sparklog.kafka import admin as kc

    with connect(args) as c:
        if args.action == "create":
            kc.create_topic(
                c, args.name, args.partitions, _parse_configs(args.config),
                args.replication_factor,
            )  # fmt: skip
            print(f"Created topic {args.name} with {args.partitions} partition(s).")
        elif args.action == "list":
            for name in kc.list_topics(c):
                print(name)
        elif args.action == "describe":
            cli_describe.show(kc.describe_topic(c, args.name), as_json=args.json)
        elif args.action == "alter":
            kc.alter_topic_configs(c, args.name, _parse_configs(args.config), args.delete_config)
            print(f"Altered configs of topic {args.name}.")
        elif args.action == "delete":
            kc.delete_topic(c, args.name)
            print(f"Deleted topic {args.name}.")
    return 0


def _topics(args: argparse.Namespace) -> int:
    if (args.data_dir is None) == (args.bootstrap_server is None):
        raise ValueError("give exactly one of --bootstrap-server HOST:PORT or --data-dir DIR")
    if args.bootstrap_server:
        return _topics_remote(args)
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
            meta = storage.topics.create(args.name, args.partitions, _parse_configs(args.config))
        print(f"Created topic {meta.name} with {meta.partitions} partition(s).")
    elif args.action == "list":
        for name in storage.topics.list():
            print(name)
    elif args.action == "describe":
        doc = cli_describe.offline(storage, args.name, _Ticker(f"describe {args.name}"))
        cli_describe.show(doc, as_json=args.json)
    elif args.action == "alter":
        with _writer_lease(storage):
            storage.topics.alter_configs(args.name, _parse_configs(args.config), args.delete_config)
        print(f"Altered configs of topic {args.name}.")
    elif args.action == "delete":
        with _writer_lease(storage):
            storage.topics.delete(args.name, progress=_Ticker(f"delete {args.name}"))
        print(f"Deleted topic {args.name}.")
    return 0


def _groups(args: argparse.Namespace) -> int:
    import time

    from sparklog.kafka import admin as kc

    with connect(args) as c:
        if args.action == "list":
            for group, state in kc.list_groups(c):
                print(f"{group}\t{state}")
        elif args.action == "describe":
            from sparklog.kafka.lag_status import group_status

            doc = kc.describe_group(c, args.group, int(time.time() * 1000))
            health = group_status(c, args.group)
            doc["status"] = health.status if health else None
            for r in doc["partitions"]:
                key = (r["topic"], r["partition"])
                r["status"] = health.partitions.get(key) if health else None
            if args.json:
                print(json.dumps(doc, indent=2))
                return 0
            status = f", lag status {doc['status']}" if doc["status"] else ""
            print(f"group {doc['group']} ({doc['state']}, {len(doc['members'])} members"
                  f"{status})")  # fmt: skip
            header = ("TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "LAG-SECONDS",
                      "STATUS", "OWNER")  # fmt: skip
            print("\t".join(header))
            for r in doc["partitions"]:
                secs = "-" if r["lag_seconds"] is None else f"{r['lag_seconds']:.1f}"
                committed = "-" if r["committed_offset"] is None else str(r["committed_offset"])
                print("\t".join([r["topic"], str(r["partition"]), committed,
                                 str(r["log_end_offset"]), str(r["lag"]), secs,
                                 r["status"] or "-", r["owner"] or "-"]))  # fmt: skip
        elif args.action == "delete":
            kc.delete_group(c, args.group)
            print(f"Deleted group {args.group}.")
        elif args.action == "reset-offsets":
            _reset_offsets(c, args)
    return 0


DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. "
    "Add --dry-run to keep this behaviour without the warning, or --execute to reset."
)


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


def _broker(args: argparse.Namespace) -> int:
    import logging

    from sparklog.broker.server import run

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run(broker_config(args))
    return 0


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """The settings of ``broker start``: its ``--config`` file under its flags."""
    from sparklog.broker.config import BrokerConfig

    return BrokerConfig.load(
        args.config,
        data_dir=args.data_dir,
        listen=args.listen,
        node_id=args.node_id,
        etcd=args.etcd,
        etcd_ca_file=args.etcd_ca_file,
        etcd_cert_file=args.etcd_cert_file,
        etcd_key_file=args.etcd_key_file,
        etcd_user=args.etcd_user,
        etcd_password_file=args.etcd_password_file,
        lease_ttl_ms=args.lease_ttl_ms,
        cluster_name=args.cluster,
        rack=args.rack,
        advertised_host=args.advertised_host,
        schema_registry=args.schema_registry,
        metrics=args.metrics,
    )


def _scheduler(args: argparse.Namespace) -> int:
    from sparklog.compaction import scheduler

    return scheduler.main(
        args.data_dir,
        spark_submit=args.spark_submit,
        spark_args=args.spark_args,
        min_interval_s=args.min_interval,
        max_interval_s=args.max_interval,
        max_jobs=args.max_jobs,
    )


def _cluster(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from sparklog.cluster.controller import describe
    from sparklog.cluster.coordination import Coordination
    from sparklog.cluster.etcd import EtcdSettings

    etcd = EtcdSettings.from_options(
        args.etcd, ca_file=args.etcd_ca_file, cert_file=args.etcd_cert_file,
        key_file=args.etcd_key_file, user=args.etcd_user, password_file=args.etcd_password_file,
    )  # fmt: skip

    async def run() -> dict[str, object]:
        coord = Coordination(etcd, cluster=args.cluster)
        try:
            return await describe(coord)
        finally:
            await coord.close()

    found: dict[str, Any] = asyncio.run(run())
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    ctl = found["controller"]
    print(f"cluster {args.cluster} (etcd {args.etcd})")
    who = "none" if ctl is None else f"node {ctl['node_id']}, epoch {ctl['epoch']}"
    print(f"controller: {who}")
    print("brokers:")
    for b in found["brokers"]:
        rack = f" rack {b['rack']}" if b["rack"] else ""
        print(f"  {b['node_id']:>4}  {b['host']}:{b['port']}{rack}")
    print(f"{'topic':<24} {'partition':>9} {'leader':>6} {'epoch':>5}  replicas")
    for p in found["partitions"]:
        offline = "" if p["online"] else "  (leader offline)"
        replicas = ",".join(str(r) for r in p["replicas"])
        print(f"{p['topic']:<24} {p['partition']:>9} {p['leader']:>6} {p['leader_epoch']:>5}  "
              f"{replicas}{offline}")  # fmt: skip
    return 0


def _add_etcd_arguments(p: argparse.ArgumentParser) -> None:
    """TLS and authentication towards etcd (docs/cluster.md, "Securing etcd"); the TOML
    keys have the same names (``etcd_ca_file``...)."""
    p.add_argument("--etcd-ca-file", metavar="FILE", help="trust etcd's certificate by this CA")
    p.add_argument("--etcd-cert-file", metavar="FILE", help="client certificate (mutual TLS)")
    p.add_argument("--etcd-key-file", metavar="FILE", help="its private key")
    p.add_argument("--etcd-user", help="etcd user (authentication)")
    p.add_argument(
        "--etcd-password-file", metavar="FILE",
        help="a file holding the etcd user's password (default: $SPARKLOG_ETCD_PASSWORD)",
    )  # fmt: skip


DESCRIPTION = (
    "sparklog: Kafka-protocol streaming storage for Spark. Run a broker, manage topics, "
    "consumer groups, users and ACLs, and schedule retention and compaction. "
    "'sparklog COMMAND --help' shows a command's options."
)
TOPIC_ACTIONS = {
    "create": "create a topic (through a broker, or offline in a storage root)",
    "list": "list the topics",
    "describe": "a topic's partitions, leaders, offsets and configs, as kafka-topics.sh "
    "--describe prints them (--json: JSON)",
    "alter": "set or reset a topic's configs",
    "delete": "delete a topic and its data",
}
GROUP_ACTIONS = {
    "list": "list the consumer groups and their states",
    "describe": "a group's members, committed offsets and lag per partition",
    "delete": "delete a group with no active members (and its committed offsets)",
    "reset-offsets": "plan, and with --execute commit, new offsets for a group's topic",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sparklog {sparklog.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    topics = add_command(sub, "topics", "create, list, describe, alter and delete topics")
    tsub = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in TOPIC_ACTIONS.items():
        p = add_command(tsub, action, text)
        if action != "list":
            p.add_argument("name", help="the topic")
        if action == "describe":
            p.add_argument("--json", action="store_true", help="print JSON")
        if action == "create":
            p.add_argument("--partitions", type=int, default=1, help="how many (default 1)")
            p.add_argument(
                "--replication-factor", type=int, default=-1, metavar="N",
                help="1 or -1 (the default) on a local storage root: it is one copy",
            )  # fmt: skip
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
        p.set_defaults(func=_topics)
    groups = add_command(sub, "groups", "consumer groups: list, describe (lag), delete, reset")
    gsub = groups.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in GROUP_ACTIONS.items():
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
        g.set_defaults(func=_groups)
    add_parsers(sub)  # users, acls
    broker = add_command(sub, "broker", "run a broker")
    bsub = broker.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = add_command(bsub, "start", "run a broker in the foreground (SIGTERM stops it)")
    start.add_argument("--data-dir", help="the storage root (default: from --config, or ./data)")
    start.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9092)")
    start.add_argument("--config", help="a broker TOML file (see conf/broker.toml)")
    start.add_argument("--node-id", type=int, help="this broker's id (default 0)")
    start.add_argument("--advertised-host", help="the host clients are told to connect to")
    start.add_argument(
        "--etcd", metavar="HOST:PORT[,HOST:PORT...]",
        help="cluster mode: the etcd endpoints (every broker over one shared --data-dir)",
    )  # fmt: skip
    _add_etcd_arguments(start)
    start.add_argument("--lease-ttl-ms", type=int, help="cluster mode: etcd lease TTL (3000)")
    start.add_argument("--cluster", help="cluster mode: the cluster's name in etcd (default)")
    start.add_argument("--rack", help="cluster mode: this broker's rack")
    start.add_argument(
        "--schema-registry", metavar="[http[s]://]HOST:PORT",
        help="serve the Schema Registry REST API there (docs/schemas.md)",
    )  # fmt: skip
    start.add_argument(
        "--metrics", metavar="HOST:PORT",
        help="serve Prometheus metrics at /metrics there (docs/metrics.md)",
    )  # fmt: skip
    start.set_defaults(func=_broker)
    cluster = add_command(sub, "cluster", "cluster mode: what etcd says (docs/cluster.md)")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    cdesc = add_command(csub, "describe", "live brokers, the controller, partition leaders")
    cdesc.add_argument("--etcd", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                       help="the etcd endpoints")  # fmt: skip
    _add_etcd_arguments(cdesc)
    cdesc.add_argument("--cluster", default="default", help="the cluster's name in etcd")
    cdesc.add_argument("--json", action="store_true", help="print JSON")
    cdesc.set_defaults(func=_cluster)
    sched = add_command(
        sub, "scheduler", "run retention and compaction on intervals from topic configs"
    )
    sched.add_argument("--data-dir", required=True, help="the storage root")
    sched.add_argument("--spark-submit", help="the spark-submit.sh to run (default: this one)")
    sched.add_argument(
        "--spark-args", default="", help='options for spark-submit, e.g. "--master yarn"'
    )
    sched.add_argument("--min-interval", type=float, default=15.0, metavar="SECONDS",
                       help="the shortest time between two checks of a topic (15)")  # fmt: skip
    sched.add_argument("--max-interval", type=float, default=300.0, metavar="SECONDS",
                       help="the longest time between two checks of a topic (300)")  # fmt: skip
    sched.add_argument(
        "--max-jobs", type=int, default=2,
        help="compaction jobs (Spark) running at once; retention runs in the scheduler itself",
    )  # fmt: skip
    sched.set_defaults(func=_scheduler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import os

    # gRPC (under the etcd client) logs a refused TLS handshake at INFO on stderr, beside
    # the one line reporting it; ERROR is its documented default
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ValueError as e:
        print(f"sparklog: error: {e}", file=sys.stderr)
        return 2
    except SparkLogError as e:
        print(f"sparklog: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"sparklog: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
