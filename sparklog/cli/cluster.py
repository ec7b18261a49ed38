"""``sparklog cluster describe``: what etcd says of a cluster (docs/cluster.md).

    sparklog cluster describe --etcd HOST:PORT[,...] [--cluster NAME] [--json]
        [--etcd-ca-file F] [--etcd-cert-file F --etcd-key-file F]
        [--etcd-user U [--etcd-password-file F]]

Live brokers, the controller and its epoch, and each partition's leader (``(leader
offline)`` when its broker is not live), or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from sparklog.cli.arguments import add_command, add_etcd_arguments
from sparklog.cli.exits import ExitCode


def add_parser(sub: Any) -> None:
    """The ``cluster`` command, on the top-level subparsers ``sub``."""
    cluster = add_command(sub, "cluster", "cluster mode: what etcd says (docs/cluster.md)")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    cdesc = add_command(csub, "describe", "live brokers, the controller, partition leaders")
    cdesc.add_argument(
        "--etcd", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="the etcd endpoints"
    )
    add_etcd_arguments(cdesc)
    cdesc.add_argument("--cluster", default="default", help="the cluster's name in etcd")
    cdesc.add_argument("--json", action="store_true", help="print JSON")
    cdesc.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``sparklog cluster describe``."""
    import asyncio

    from sparklog.cluster.controller import describe
    from sparklog.cluster.coordination import Coordination
    from sparklog.cluster.etcd import EtcdSettings

    etcd = EtcdSettings.from_options(
        args.etcd,
        ca_file=args.etcd_ca_file,
        cert_file=args.etcd_cert_file,
        key_file=args.etcd_key_file,
        user=args.etcd_user,
        password_file=args.etcd_password_file,
    )

    async def read() -> dict[str, object]:
        coord = Coordination(etcd, cluster=args.cluster)
        try:
            return await describe(coord)
        finally:
            await coord.close()

    found: dict[str, Any] = asyncio.run(read())
    if args.json:
        print(json.dumps(found, indent=2))
        return ExitCode.OK
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
        where = f"{p['topic']:<24} {p['partition']:>9} {p['leader']:>6} {p['leader_epoch']:>5}"
        print(f"{where}  {replicas}{offline}")
    return ExitCode.OK
