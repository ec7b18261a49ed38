"""etcd over TLS with client certificates and authentication: what a broker's etcd session
does against a real etcd 3.4 started with ``--cert-file --key-file --trusted-ca-file
--client-cert-auth`` and ``auth enable`` (``secure_etcd``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sparklog.cluster.coordination import BrokerInfo, Coordination
from sparklog.errors import EtcdAccessError
from sparklog_testkit.processes import EtcdCluster
from tests.cluster.conftest import (
    EtcdCerts,
    _need_etcd,
    broker_etcd,
    secured_etcd,
)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def broker(i: int) -> BrokerInfo:
    return BrokerInfo(i, "127.0.0.1", 9000 + i)


def test_a_broker_registers_over_tls_as_its_etcd_user(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts
) -> None:
    async def main() -> None:
        a = Coordination(broker_etcd(secure_etcd, etcd_certs))
        await a.register(broker(1))
        assert await a.brokers() == [broker(1)]
        assert (await a.campaign(1)).node_id == 1
        await a.close()

    run(main())


def refused(settings: Any) -> str:
    """The EtcdAccessError a registration over ``settings`` ends in, within a deadline:
    a refusal is told at once, never retried until some timeout."""

    async def main() -> str:
        a = Coordination(settings, timeout_s=5.0)
        started = time.monotonic()
        try:
            with pytest.raises(EtcdAccessError) as e:
                await a.register(broker(1))
        finally:
            await a.close()
        assert time.monotonic() - started < 4.0, "refused only after the call timed out"
        return str(e.value)

    result: str = run(main())
    return result


def test_a_server_certificate_from_another_ca_is_refused(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts
) -> None:
    message = refused(broker_etcd(secure_etcd, etcd_certs, ca_file=etcd_certs.other_ca))
    assert "not trusted by etcd_ca_file" in message
    assert secure_etcd.endpoints in message


def test_no_client_certificate_is_refused(secure_etcd: EtcdCluster, etcd_certs: EtcdCerts) -> None:
    message = refused(broker_etcd(secure_etcd, etcd_certs, cert_file=None, key_file=None))
    assert "wants a client certificate" in message


def test_a_wrong_password_is_refused(secure_etcd: EtcdCluster, etcd_certs: EtcdCerts) -> None:
    message = refused(broker_etcd(secure_etcd, etcd_certs, password="wrong"))
    assert "refused the user or password" in message
    assert "wrong" not in message.replace("refused", "")  # the password is never shown


def test_a_certificate_whose_name_is_no_etcd_user_is_refused(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts
) -> None:
    # without a user, etcd takes the client certificate's common name as the user
    message = refused(broker_etcd(
        secure_etcd, etcd_certs, cert_file=etcd_certs.stranger_cert,
        key_file=etcd_certs.stranger_key, user=None, password=None,
    ))  # fmt: skip
    assert "no permission on the cluster's keys" in message


def test_a_certificate_named_as_an_etcd_user_needs_no_password(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts
) -> None:
    async def main() -> None:
        a = Coordination(broker_etcd(secure_etcd, etcd_certs, user=None, password=None))
        await a.register(broker(1))
        assert await a.brokers() == [broker(1)]
        await a.close()

    run(main())


def test_plain_http_to_a_tls_etcd_is_not_taken_for_success(
    secure_etcd: EtcdCluster, etcd_certs: EtcdCerts
) -> None:
    from sparklog.errors import CoordinationError

    plain = secure_etcd.endpoints.replace("https://", "")

    async def main() -> None:
        a = Coordination(plain, timeout_s=1.0)
        with pytest.raises(CoordinationError):
            await a.register(broker(1))
        await a.close()

    run(main())


def test_an_expired_auth_token_is_renewed(tmp_path: Path, etcd_certs: EtcdCerts) -> None:
    """etcd forgets a simple token unused for ``--auth-token-ttl`` seconds (1 here; each
    use extends it); aetcd authenticates only when it connects. A session idle past the
    TTL still works: the call etcd refuses with "invalid auth token" is made again on a
    new, authenticated connection. To know the session's token has expired without
    guessing a sleep, the test connects witnesses after the session's last call and asks
    each only once, in turn, until one is refused: the session's token, older and as
    unused, is gone too."""
    _need_etcd()
    cluster = secured_etcd(str(tmp_path / "etcd-ttl"), etcd_certs, auth_token_ttl_s=1)
    settings = broker_etcd(cluster, etcd_certs)

    async def main() -> None:
        a = Coordination(settings)
        assert await a.brokers() == []  # connected and authenticated
        witnesses = [settings.client(*settings.addresses[0], 5.0) for _ in range(20)]
        for w in witnesses:
            await w.connect()
        try:
            for w in witnesses:
                try:
                    await w.get(a.key("x"))
                except Exception as e:
                    assert "invalid auth token" in str(e)
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("no witness's token expired")
            assert await a.brokers() == []  # the session's token had expired as well
        finally:
            for w in witnesses:
                await w.close()
            await a.close()

    try:
        run(main())
    finally:
        cluster.stop()
