"""``sparklog broker start``: run a broker in the foreground (SIGTERM stops it).

    sparklog broker start [--data-dir DIR] [--listen HOST:PORT] [--config FILE]
        [--node-id N] [--advertised-host H] [--etcd HOST:PORT[,...] [--etcd-* ...]
        [--lease-ttl-ms MS] [--cluster NAME] [--rack R]] [--cache-dir DIR]
        [--flush-ms MS] [--schema-registry URL] [--metrics HOST:PORT]

The flags override the ``--config`` TOML file (``conf/broker.toml``; ``BrokerConfig``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sparklog.cli.arguments import add_command, add_etcd_arguments
from sparklog.cli.exits import ExitCode

if TYPE_CHECKING:
    from sparklog.broker.config import BrokerConfig


def add_parser(sub: Any) -> None:
    """The ``broker`` command, on the top-level subparsers ``sub``."""
    broker = add_command(sub, "broker", "run a broker")
    bsub = broker.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = add_command(bsub, "start", "run a broker in the foreground (SIGTERM stops it)")
    start.add_argument("--data-dir", help="the storage root (default: from --config, or ./data)")
    start.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9092)")
    start.add_argument("--config", help="a broker TOML file (see conf/broker.toml)")
    start.add_argument("--node-id", type=int, help="this broker's id (default 0)")
    start.add_argument("--advertised-host", help="the host clients are told to connect to")
    start.add_argument(
        "--etcd",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="cluster mode: the etcd endpoints (every broker over one shared --data-dir)",
    )
    add_etcd_arguments(start)
    start.add_argument("--lease-ttl-ms", type=int, help="cluster mode: etcd lease TTL (3000)")
    start.add_argument(
        "--cache-dir",
        help="a --data-dir on object storage (s3://): where this broker keeps its active "
        "segments (default: under the system's temp dir)",
    )
    start.add_argument(
        "--flush-ms", type=int, help="a --data-dir on object storage: the flush round (100)"
    )
    start.add_argument("--cluster", help="cluster mode: the cluster's name in etcd (default)")
    start.add_argument("--rack", help="cluster mode: this broker's rack")
    start.add_argument(
        "--schema-registry",
        metavar="[http[s]://]HOST:PORT",
        help="serve the Schema Registry REST API there (docs/schemas.md)",
    )
    start.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at /metrics there (docs/metrics.md)",
    )
    start.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``sparklog broker start``: until SIGTERM. SIGUSR1 prints every thread's stack to
    stderr (``faulthandler``): how to see where a broker that stopped answering waits."""
    import faulthandler
    import logging
    import signal

    from sparklog.broker.server import run as serve

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    serve(broker_config(args))
    return ExitCode.OK


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
        cache_dir=args.cache_dir,
        flush_ms=args.flush_ms,
        cluster_name=args.cluster,
        rack=args.rack,
        advertised_host=args.advertised_host,
        schema_registry=args.schema_registry,
        metrics=args.metrics,
    )
