"""Topic admin calls through the clients that have them (confluent's AdminClient,
kafka-python's KafkaAdminClient, aiokafka's AIOKafkaAdminClient): what they create is
checked in storage."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparklog.storage import Storage

from .clients import (
    T0,
    TIMEOUT,
    Confluent,
    Rec,
    read_storage,
    seed,
    without_internal,
)
from .conftest import BrokerProcess
from .rawclient import RawClient

# ---------------------------------------------------------------------------- admin


class Admin:
    """Topic admin calls through one client library. ``create_topic`` returns the Kafka
    error code (0: created); the other calls raise on errors."""

    name = ""

    def create_topic(
        self, bootstrap: str, name: str, partitions: int, configs: dict[str, str]
    ) -> int:
        raise NotImplementedError

    def describe_configs(self, bootstrap: str, name: str) -> dict[str, str]:
        """Every config of topic ``name``, defaults included."""
        raise NotImplementedError

    def delete_topic(self, bootstrap: str, name: str) -> None:
        raise NotImplementedError

    def create_partitions(self, bootstrap: str, name: str, total: int) -> None:
        raise NotImplementedError


class ConfluentAdmin(Admin):
    name = "confluent"

    @contextlib.contextmanager
    def _admin(self, bootstrap: str) -> Iterator[Any]:
        from confluent_kafka.admin import AdminClient

        # AdminClient has no close(); dropping the last reference destroys the handle
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
        try:
            yield admin
        finally:
            del admin

    def create_topic(
        self, bootstrap: str, name: str, partitions: int, configs: dict[str, str]
    ) -> int:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        with self._admin(bootstrap) as admin:
            new = NewTopic(name, partitions, 1, config=configs)
            (future,) = admin.create_topics([new], operation_timeout=TIMEOUT).values()
            try:
                future.result(TIMEOUT)
            except KafkaException as e:
                return int(e.args[0].code())
            return 0

    def describe_configs(self, bootstrap: str, name: str) -> dict[str, str]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        with self._admin(bootstrap) as admin:
            resource = ConfigResource(ResourceType.TOPIC, name)
            (future,) = admin.describe_configs([resource]).values()
            return {k: e.value for k, e in future.result(TIMEOUT).items()}

    def delete_topic(self, bootstrap: str, name: str) -> None:
        with self._admin(bootstrap) as admin:
            for f in admin.delete_topics([name], operation_timeout=TIMEOUT).values():
                f.result(TIMEOUT)

    def create_partitions(self, bootstrap: str, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        with self._admin(bootstrap) as admin:
            new = [NewPartitions(name, total)]
            for f in admin.create_partitions(new, operation_timeout=TIMEOUT).values():
                f.result(TIMEOUT)


class KafkaPythonAdmin(Admin):
    name = "kafka-python"

    @contextlib.contextmanager
    def _admin(self, bootstrap: str) -> Iterator[Any]:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        try:
            yield admin
        finally:
            admin.close()

    def create_topic(
        self, bootstrap: str, name: str, partitions: int, configs: dict[str, str]
    ) -> int:
        from kafka.admin import NewTopic
        from kafka.errors import BrokerResponseError

        with self._admin(bootstrap) as admin:
            try:
                admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
            except BrokerResponseError as e:
                return int(e.errno)
            return 0

    def describe_configs(self, bootstrap: str, name: str) -> dict[str, str]:
        from kafka.admin import ConfigResource, ConfigResourceType

        with self._admin(bootstrap) as admin:
            resource = ConfigResource(ConfigResourceType.TOPIC, name)
            result = admin.describe_configs([resource], config_filter="all")
            return {k: e["value"] for k, e in result["topic"][name].items()}

    def delete_topic(self, bootstrap: str, name: str) -> None:
        with self._admin(bootstrap) as admin:
            admin.delete_topics([name])

    def create_partitions(self, bootstrap: str, name: str, total: int) -> None:
        from kafka.admin import NewPartitions

        with self._admin(bootstrap) as admin:
            admin.create_partitions({name: NewPartitions(total)})


class AioKafkaAdmin(Admin):
    """aiokafka's admin client returns responses without raising: codes are checked here."""

    name = "aiokafka"

    def _call(self, bootstrap: str, call: Callable[[Any], Any]) -> Any:
        from aiokafka.admin import AIOKafkaAdminClient

        async def run() -> Any:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
            await admin.start()
            try:
                return await call(admin)
            finally:
                await admin.close()

        return asyncio.run(run())

    def create_topic(
        self, bootstrap: str, name: str, partitions: int, configs: dict[str, str]
    ) -> int:
        from aiokafka.admin import NewTopic

        new = NewTopic(name, partitions, 1, topic_configs=configs)
        resp = self._call(bootstrap, lambda a: a.create_topics([new]))
        ((_name, code, *_rest),) = resp.topic_errors
        return int(code)

    def describe_configs(self, bootstrap: str, name: str) -> dict[str, str]:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        (resp,) = self._call(bootstrap, lambda a: a.describe_configs([resource]))
        ((error_code, _msg, _type, _name, entries),) = resp.resources
        assert error_code == 0, resp
        return {e[0]: e[1] for e in entries}

    def delete_topic(self, bootstrap: str, name: str) -> None:
        resp = self._call(bootstrap, lambda a: a.delete_topics([name]))
        assert [e[1] for e in resp.topic_error_codes] == [0], resp

    def create_partitions(self, bootstrap: str, name: str, total: int) -> None:
        from aiokafka.admin import NewPartitions

        resp = self._call(bootstrap, lambda a: a.create_partitions({name: NewPartitions(total)}))
        assert [e[1] for e in resp.topic_errors] == [0], resp


ADMINS = [
    pytest.param(ConfluentAdmin(), id="confluent"),
    pytest.param(KafkaPythonAdmin(), id="kafka-python"),
    pytest.param(AioKafkaAdmin(), id="aiokafka"),
]
TOPIC_CONFIGS = {"retention.ms": "3600000", "cleanup.policy": "compact"}


def user_topics(data_dir: str) -> list[str]:
    """The topics in storage, without internal ones."""
    return [t for t in Storage(data_dir).topics.list() if not t.startswith("__")]


def stored_topic(broker: BrokerProcess, name: str) -> Any:
    assert broker.stop() == 0
    return Storage(broker.data_dir).topics.get(name)


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_create_topic_with_configs_and_partitions(
    broker: BrokerProcess, admin: Admin
) -> None:
    assert admin.create_topic(broker.bootstrap, "made", 3, TOPIC_CONFIGS) == 0
    meta = stored_topic(broker, "made")
    assert meta.partitions == 3
    assert meta.config.retention_ms == 3_600_000
    assert meta.config.cleanup_policy == "compact"


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_describe_configs(broker: BrokerProcess, admin: Admin) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("described", 1, TOPIC_CONFIGS).error_code == 0
    configs = admin.describe_configs(broker.bootstrap, "described")
    assert configs["retention.ms"] == "3600000"
    assert configs["cleanup.policy"] == "compact"
    assert configs["max.message.bytes"] == "1048588"  # Kafka's default


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_delete_topic(broker: BrokerProcess, admin: Admin) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("doomed", 2).error_code == 0
        assert raw.create_topic("kept", 1).error_code == 0
    admin.delete_topic(broker.bootstrap, "doomed")
    assert without_internal(Confluent().list_topics(broker.bootstrap)) == {"kept": 1}
    assert broker.stop() == 0
    assert user_topics(broker.data_dir) == ["kept"]


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_create_partitions(broker: BrokerProcess, admin: Admin) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("grown", 1).error_code == 0
    admin.create_partitions(broker.bootstrap, "grown", 4)
    with RawClient.connect(broker.bootstrap) as raw:
        seed(raw, "grown", [Rec(3, b"k", b"in the new partition", (), T0)])
    meta = stored_topic(broker, "grown")
    assert meta.partitions == 4
    assert read_storage(broker.data_dir, "grown") == [
        Rec(3, b"k", b"in the new partition", (), T0, 0)
    ]


TOPIC_ALREADY_EXISTS, INVALID_CONFIG = 36, 40


@pytest.mark.parametrize("admin", ADMINS)
def test_admin_create_existing_topic_fails(broker: BrokerProcess, admin: Admin) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("taken", 2).error_code == 0
    assert admin.create_topic(broker.bootstrap, "taken", 5, {}) == TOPIC_ALREADY_EXISTS
    assert stored_topic(broker, "taken").partitions == 2


@pytest.mark.parametrize(
    "configs",
    [{"retention.ms": "soon"}, {"no.such.config": "1"}],
    ids=["bad-value", "unknown-name"],
)
@pytest.mark.parametrize("admin", ADMINS)
def test_admin_create_topic_with_invalid_config_fails(
    broker: BrokerProcess, admin: Admin, configs: dict[str, str]
) -> None:
    assert admin.create_topic(broker.bootstrap, "invalid", 1, configs) == INVALID_CONFIG
    assert broker.stop() == 0
    assert user_topics(broker.data_dir) == []
