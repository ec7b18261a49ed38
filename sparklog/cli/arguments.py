"""The arguments several commands share, and what they turn into.

``add_command`` declares every command and action (its line in the parent's help heads
its own). ``--bootstrap-server HOST:PORT [--command-config FILE]`` is how a command reaches
a broker: ``--command-config`` is a Java properties file of Kafka client settings
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``,
``ssl.truststore.location``...; see ``ClientSettings.from_options``), as Kafka's tools take.
The ``--etcd-*`` flags are TLS and authentication towards etcd (docs/cluster.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparklog.kafka.client import ClientSettings, KafkaClient, parse_properties


def add_command(sub: Any, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand of ``sub`` whose line ``text`` shows in its parent's help and heads its
    own (every ``sparklog`` command and action is made here)."""
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=text[0].upper() + text[1:] + "."
    )
    return p


def add_connection_arguments(p: argparse.ArgumentParser, *, required: bool) -> None:
    p.add_argument("--bootstrap-server", required=required, help="HOST:PORT of a broker")
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client settings (properties file): security.protocol, sasl.*, ssl.*",
    )


def client_settings(bootstrap: str, command_config: str | None = None) -> ClientSettings:
    """Settings from ``--bootstrap-server`` and ``--command-config`` (errors name them)."""
    options: dict[str, str] = {}
    if command_config is not None:
        try:
            options = parse_properties(Path(command_config).read_text())
        except OSError as e:
            raise ValueError(f"--command-config: cannot read {command_config}: {e}") from None
    options = {k: v for k, v in options.items() if k.lower() != "bootstrap.servers"}
    options["bootstrap.servers"] = bootstrap
    try:
        return ClientSettings.from_options(options)
    except ValueError as e:
        where = "--bootstrap-server" if command_config is None else "--command-config"
        raise ValueError(f"{where}: {e}") from None


def connect(args: argparse.Namespace) -> KafkaClient:
    return KafkaClient(client_settings(args.bootstrap_server, args.command_config))


def add_etcd_arguments(p: argparse.ArgumentParser) -> None:
    """TLS and authentication towards etcd (docs/cluster.md, "Securing etcd"); the TOML
    keys have the same names (``etcd_ca_file``...)."""
    p.add_argument("--etcd-ca-file", metavar="FILE", help="trust etcd's certificate by this CA")
    p.add_argument("--etcd-cert-file", metavar="FILE", help="client certificate (mutual TLS)")
    p.add_argument("--etcd-key-file", metavar="FILE", help="its private key")
    p.add_argument("--etcd-user", help="etcd user (authentication)")
    p.add_argument(
        "--etcd-password-file",
        metavar="FILE",
        help="a file holding the etcd user's password (default: $SPARKLOG_ETCD_PASSWORD)",
    )
