"""The ``sparklog`` command: its parser, made of one module per command, and its ``main``.

    sparklog --version
    sparklog topics ...      (sparklog.cli.topics; what describe prints: sparklog.cli.describe)
    sparklog groups ...      (sparklog.cli.groups)
    sparklog users ...       sparklog acls ...      (sparklog.cli.security)
    sparklog broker start    (sparklog.cli.broker)
    sparklog cluster describe    (sparklog.cli.cluster)
    sparklog scheduler       (sparklog.cli.scheduler)

Every ``--bootstrap-server`` takes ``--command-config``, a properties file of Kafka client
security settings as Kafka's tools take (``sparklog.cli.arguments``). Errors print one line
on stderr, ``sparklog: error: ...``, and exit ``USAGE`` (2: bad arguments, a
``ValueError``) or ``FAILED`` (1: any other sparklog error, or an ``OSError``); see
``sparklog.cli.exits``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import sparklog
from sparklog.cli import broker, cluster, groups, scheduler, security, topics
from sparklog.cli.exits import ExitCode
from sparklog.errors import SparkLogError

DESCRIPTION = (
    "sparklog: Kafka-protocol streaming storage for Spark. Run a broker, manage topics, "
    "consumer groups, users and ACLs, and schedule retention and compaction. "
    "'sparklog COMMAND --help' shows a command's options."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sparklog {sparklog.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    topics.add_parser(sub)
    groups.add_parser(sub)
    security.add_parsers(sub)  # users, acls
    broker.add_parser(sub)
    cluster.add_parser(sub)
    scheduler.add_parser(sub)
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
        return ExitCode.USAGE
    except (SparkLogError, OSError) as e:
        print(f"sparklog: error: {e}", file=sys.stderr)
        return ExitCode.FAILED
