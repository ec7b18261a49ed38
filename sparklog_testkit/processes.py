"""Brokers and etcd in child processes, for the tests and benchmarks: the demo's
(``sparklog.demo.processes``, whose docstring says how they run), and what only tests and
benchmarks add to them: etcd serving TLS and with users (``EtcdCluster(tls=...)``,
``enable_auth``), brokers started through another script (``BrokerCluster(launcher=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparklog.demo import processes
from sparklog.demo.processes import BrokerProcess, die_with_parent

if TYPE_CHECKING:
    from sparklog.cluster.etcd import EtcdSettings

__all__ = ["BrokerCluster", "BrokerProcess", "EtcdCluster", "EtcdServerTls", "die_with_parent"]


@dataclass(frozen=True)
class EtcdServerTls:
    """etcd's own TLS: its certificate and key (``--cert-file``, ``--key-file``) and, with
    ``client_cert_auth``, the CA its clients' certificates must chain to
    (``--trusted-ca-file --client-cert-auth``)."""

    cert_file: str
    key_file: str
    ca_file: str
    client_cert_auth: bool = True


class EtcdCluster(processes.EtcdCluster):
    """The demo's etcd members, with ``tls`` (``endpoints`` then say ``https://``) and
    ``auth_token_ttl_s``: etcd's ``--auth-token-ttl`` (how long an unused auth token
    lives); ``enable_auth`` adds users and turns authentication on."""

    def __init__(
        self,
        work_dir: str,
        members: int = 1,
        *,
        tls: EtcdServerTls | None = None,
        auth_token_ttl_s: int | None = None,
    ) -> None:
        super().__init__(work_dir, members)
        self.tls = tls
        self.auth_token_ttl_s = auth_token_ttl_s
        if tls is not None:
            self.scheme = "https"

    @property
    def endpoints(self) -> str:
        scheme = "https://" if self.tls else ""
        return ",".join(f"{scheme}127.0.0.1:{p}" for p in self.client_ports)

    def client_flags(self) -> list[str]:
        flags: list[str] = []
        if self.tls:
            flags = ["--cert-file", self.tls.cert_file, "--key-file", self.tls.key_file]
            if self.tls.client_cert_auth:
                flags += ["--trusted-ca-file", self.tls.ca_file, "--client-cert-auth"]
        if self.auth_token_ttl_s is not None:
            flags += ["--auth-token-ttl", str(self.auth_token_ttl_s)]
        return flags

    def enable_auth(
        self,
        admin: EtcdSettings,
        root_password: str,
        users: dict[str, str],
        prefix: bytes = b"/sparklog/",
    ) -> None:
        """Turn etcd's authentication on, as ``etcdctl user add root; role add; user add;
        auth enable`` would: ``root`` (etcd requires it), and each of ``users`` (name ->
        password) with the role ``sparklog``, which may read and write the keys under
        ``prefix``. ``admin``: how to reach this etcd (its TLS settings; no user yet)."""
        import asyncio

        from aetcd import rpc

        async def run() -> None:
            host, port = admin.addresses[0]
            client = admin.client(host, port, 10.0)
            await client.connect()
            try:
                auth = rpc.AuthStub(client.channel)
                await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=root_password))
                await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
                await auth.RoleAdd(rpc.AuthRoleAddRequest(name="sparklog"))
                end = prefix[:-1] + bytes([prefix[-1] + 1])  # every key with the prefix
                perm = rpc.Permission(permType=rpc.Permission.READWRITE, key=prefix, range_end=end)
                await auth.RoleGrantPermission(
                    rpc.AuthRoleGrantPermissionRequest(name="sparklog", perm=perm)
                )
                for name, password in users.items():
                    await auth.UserAdd(rpc.AuthUserAddRequest(name=name, password=password))
                    await auth.UserGrantRole(
                        rpc.AuthUserGrantRoleRequest(user=name, role="sparklog")
                    )
                await auth.AuthEnable(rpc.AuthEnableRequest())
            finally:
                await client.close()

        asyncio.run(run())


class BrokerCluster(processes.BrokerCluster):
    """The demo's ``BrokerCluster``; ``launcher`` replaces ``-m sparklog.cli`` with another
    script that takes the same ``broker start`` arguments (a benchmark's own, e.g.
    ``bench/_unfenced_broker.py``)."""

    def __init__(
        self,
        data_dir: str,
        endpoints: str,
        n: int = 3,
        *,
        launcher: tuple[str, ...] = ("-m", "sparklog.cli"),
        **options: Any,
    ) -> None:
        super().__init__(data_dir, endpoints, n, **options)
        for broker in self.brokers.values():
            broker.program = launcher
