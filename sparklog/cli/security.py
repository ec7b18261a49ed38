"""``sparklog users`` and ``sparklog acls``: SCRAM users and Kafka ACLs.

    sparklog users add NAME --mechanism SCRAM-SHA-256|SCRAM-SHA-512 [--iterations N] TARGET
    sparklog users list TARGET
    sparklog users delete NAME --mechanism M TARGET
    sparklog acls list [--principal P ...] [RESOURCE ...] [--resource-pattern-type T] BROKER
    sparklog acls add|remove (--allow-principal P | --deny-principal P) ... [--allow-host H]
        [--deny-host H] [--operation OP ...] RESOURCE ... [--resource-pattern-type T] BROKER

BROKER is ``--bootstrap-server HOST:PORT [--command-config FILE]``; TARGET is BROKER
(DescribeUserScramCredentials / AlterUserScramCredentials) or ``--data-dir DIR`` (offline:
the credential store of the storage root). ``users add`` reads the password from the first
line of standard input. RESOURCE is ``--topic T``, ``--group G``, ``--cluster`` or
``--transactional-id T``, each repeatable, as in Kafka's ``kafka-acls``: ``add`` makes one
ACL per resource, principal, host and operation (hosts default to ``*``, the operation to
``ALL``); ``remove`` deletes the ACLs matching those (with no principal: every ACL of the
resources; with no operation: any operation); ``list`` shows the ACLs matching the
resources and principals given (all of them when none is). ``--command-config``:
``sparklog.cli.arguments``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from sparklog.cli.arguments import add_command, add_connection_arguments, connect
from sparklog.cli.exits import ExitCode

# ---------------------------------------------------------------------------- users


def _read_password() -> str:
    line = sys.stdin.readline()
    password = line.removesuffix("\n").removesuffix("\r")
    if not password:
        raise ValueError("users add: give the password on the first line of standard input")
    return password


def _users(args: argparse.Namespace) -> int:
    if (args.data_dir is None) == (args.bootstrap_server is None):
        raise ValueError("give exactly one of --bootstrap-server HOST:PORT or --data-dir DIR")
    if args.command_config is not None and args.bootstrap_server is None:
        raise ValueError("--command-config needs --bootstrap-server")
    if args.bootstrap_server is not None:
        return _users_remote(args)
    from sparklog.security.scram import make_credential
    from sparklog.security.store import CredentialStore
    from sparklog.storage import Storage

    store = CredentialStore(Storage(args.data_dir))  # users may come before any topic
    if args.action == "add":
        cred = make_credential(args.mechanism.upper(), _read_password(), args.iterations)
        store.upsert(args.name, cred)
        print(f"Set the {cred.mechanism} credential of user {args.name}.")
    elif args.action == "delete":
        if not store.delete(args.name, args.mechanism.upper()):
            raise ValueError(f"user {args.name!r} has no {args.mechanism.upper()} credential")
        print(f"Deleted the {args.mechanism.upper()} credential of user {args.name}.")
    else:
        found = store.users().items()
        _print_users({u: {m: c.iterations for m, c in creds.items()} for u, creds in found})
    return ExitCode.OK


def _users_remote(args: argparse.Namespace) -> int:
    from sparklog.kafka import security_admin as sa

    with connect(args) as c:
        if args.action == "add":
            password = _read_password()
            sa.upsert_user_scram_credential(c, args.name, args.mechanism, password, args.iterations)
            print(f"Set the {args.mechanism.upper()} credential of user {args.name}.")
        elif args.action == "delete":
            sa.delete_user_scram_credential(c, args.name, args.mechanism)
            print(f"Deleted the {args.mechanism.upper()} credential of user {args.name}.")
        else:
            _print_users(sa.describe_user_scram_credentials(c))
    return ExitCode.OK


def _print_users(users: dict[str, dict[str, int]]) -> None:
    for user in sorted(users):
        creds = ", ".join(f"{m} (iterations {n})" for m, n in sorted(users[user].items()))
        print(f"{user}\t{creds}")


# ---------------------------------------------------------------------------- ACLs


def _resources(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [("TOPIC", t) for t in args.topic] + [
        ("GROUP", g) for g in args.group
    ]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("CLUSTER", "kafka-cluster"))
    return out


def _acls(args: argparse.Namespace) -> int:
    from sparklog.kafka import security_admin as sa

    pattern = (args.resource_pattern_type or {"list": "ANY"}.get(args.action, "LITERAL")).upper()
    if args.action == "add" and pattern not in ("LITERAL", "PREFIXED"):
        raise ValueError("--resource-pattern-type of acls add must be literal or prefixed")
    resources = _resources(args)
    if args.action == "list":
        if args.allow_principal or args.deny_principal:
            raise ValueError("acls list filters with --principal, not --allow/--deny-principal")
        filters = [
            sa.Acl(rtype, name, pattern, principal, None, "ANY", "ANY")
            for rtype, name in resources or [("ANY", None)]
            for principal in args.principal or [None]
        ]
        with connect(args) as c:
            found = {a for f in filters for a in sa.describe_acls(c, f)}
        _print_acls(sorted(found, key=str))
        return ExitCode.OK
    if args.principal:
        raise ValueError(f"acls {args.action} takes --allow-principal/--deny-principal")
    if not resources:
        raise ValueError(
            f"acls {args.action} needs a resource: --topic, --group, --cluster or "
            "--transactional-id"
        )
    grants = [("ALLOW", p, args.allow_host or ["*"]) for p in args.allow_principal]
    grants += [("DENY", p, args.deny_host or ["*"]) for p in args.deny_principal]
    if args.action == "add":
        if not grants:
            raise ValueError("acls add needs --allow-principal or --deny-principal")
        ops = args.operation or ["ALL"]
        acls = [
            sa.Acl(rtype, name, pattern, principal, host, op.upper(), perm)
            for rtype, name in resources
            for perm, principal, hosts in grants
            for host in hosts
            for op in ops
        ]
        with connect(args) as c:
            sa.create_acls(c, acls)
        print(f"Added {len(acls)} ACL(s):")
        _print_acls(acls)
        return ExitCode.OK
    ops = args.operation or ["ANY"]
    filters = [
        sa.Acl(rtype, name, pattern, principal, host, op.upper(), perm)
        for rtype, name in resources
        for perm, principal, hosts in grants or [("ANY", None, [None])]
        for host in hosts
        for op in ops
    ]
    with connect(args) as c:
        removed = sa.delete_acls(c, filters)
    print(f"Removed {len(removed)} ACL(s)" + (":" if removed else "."))
    _print_acls(removed)
    return ExitCode.OK


def _print_acls(acls: Sequence[Any]) -> None:
    by_resource: dict[tuple[str, str, str], list[Any]] = {}
    for a in acls:
        by_resource.setdefault((a.resource_type, a.pattern_type, a.resource_name), []).append(a)
    for (rtype, ptype, name), found in sorted(by_resource.items()):
        print(f"{rtype} {name} ({ptype}):")
        for a in found:
            print(f"\t{a.permission}\t{a.principal}\t{a.operation}\thost={a.host}")


# ---------------------------------------------------------------------------- parsers

USER_ACTIONS = {
    "add": "set a user's SCRAM credential (the password on the first line of stdin)",
    "list": "list the users and their SCRAM mechanisms",
    "delete": "delete a user's credential for one mechanism",
}
ACL_ACTIONS = {
    "list": "list the ACLs matching the resources and principals given (all without any)",
    "add": "add an ACL per resource, principal, host and operation",
    "remove": "remove the ACLs matching the resources, principals, hosts and operations",
}
ACL_FLAGS = {
    "--allow-principal": "a principal the ACL allows (User:NAME)",
    "--deny-principal": "a principal the ACL denies (User:NAME)",
    "--allow-host": "a host allowed (default *)",
    "--deny-host": "a host denied (default *)",
    "--principal": "list: ACLs of this principal",
    "--topic": "a topic resource",
    "--group": "a consumer group resource",
    "--transactional-id": "a transactional id resource",
}


def add_parsers(sub: Any) -> None:
    """The ``users`` and ``acls`` subcommands, on the top-level subparsers ``sub``."""
    users = add_command(sub, "users", "SCRAM users: add (password on stdin), list, delete")
    usub = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in USER_ACTIONS.items():
        u = add_command(usub, action, text)
        if action != "list":
            u.add_argument("name", help="the user")
            u.add_argument(
                "--mechanism",
                required=True,
                type=str.upper,
                choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
            )
        if action == "add":
            u.add_argument(
                "--iterations",
                type=int,
                default=4096,
                help="SCRAM iterations (4096, Kafka's minimum)",
            )
        add_connection_arguments(u, required=False)
        u.add_argument("--data-dir", help="the storage root (offline use, no broker)")
        u.set_defaults(func=_users)
    acls = add_command(sub, "acls", "Kafka ACLs: list, add, remove (through a broker)")
    asub = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in ACL_ACTIONS.items():
        a = add_command(asub, action, text)
        add_connection_arguments(a, required=True)
        for flag, what in ACL_FLAGS.items():
            a.add_argument(flag, action="append", default=[], help=f"{what}, repeatable")
        a.add_argument(
            "--operation",
            action="append",
            default=[],
            type=str.upper,
            help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ALL, ...",
        )
        a.add_argument("--cluster", action="store_true", help="the cluster resource")
        patterns = ["literal", "prefixed"] + (["any", "match"] if action != "add" else [])
        a.add_argument("--resource-pattern-type", type=str.lower, choices=patterns)
        a.set_defaults(func=_acls)
