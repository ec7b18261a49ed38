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

    def alter_configs(self, bootstrap: str, name: str, configs: dict[str, str]) -> None:
        """AlterConfigs: the topic's configs become ``configs`` (others: their defaults)."""
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

    def alter_configs(self, bootstrap: str, name: str, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import ConfigResource, ResourceType

        with self._admin(bootstrap) as admin:
            resource = ConfigResource(ResourceType.TOPIC, name, set_config=configs)
            for f in admin.alter_configs([resource]).values():
                f.result(TIMEOUT)

    def incremental_alter_configs(
        self, bootstrap: str, resource_type: Any, name: str, ops: list[tuple[str, str, str | None]]
    ) -> None:
        """``ops``: (operation: SET|DELETE|APPEND|SUBTRACT, config name, value)."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entries = [
            ConfigEntry(n, v, incremental_operation=getattr(AlterConfigOpType, op))
            for op, n, v in ops
        ]
        with self._admin(bootstrap) as admin:
            resource = ConfigResource(resource_type, name, incremental_configs=entries)
            for f in admin.incremental_alter_configs([resource]).values():
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

    def alter_configs(self, bootstrap: str, name: str, configs: dict[str, str]) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType

        with self._admin(bootstrap) as admin:
            resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=configs)
            result = admin.alter_configs([resource], incremental=False)  # AlterConfigs
            assert "Error" not in repr(result), result


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

    def alter_configs(self, bootstrap: str, name: str, configs: dict[str, str]) -> None:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs)
        (resp,) = self._call(bootstrap, lambda a: a.alter_configs([resource]))
        assert [r[0] for r in resp.resources] == [0], resp


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


# ---------------------------------------------------------------------------- config changes


@pytest.mark.parametrize("admin", [p for p in ADMINS if p.id != "kafka-python"])
def test_admin_alter_configs_replaces_a_topics_configs(broker: BrokerProcess, admin: Admin) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("altered", 1, TOPIC_CONFIGS).error_code == 0
    admin.alter_configs(broker.bootstrap, "altered", {"retention.ms": "7200000"})
    configs = admin.describe_configs(broker.bootstrap, "altered")
    assert configs["retention.ms"] == "7200000"
    assert configs["cleanup.policy"] == "delete"  # not given: back to the default
    meta = stored_topic(broker, "altered")
    assert (meta.config.retention_ms, meta.config.cleanup_policy) == (7_200_000, "delete")


def test_kafka_pythons_alter_configs_keeps_the_configs_it_does_not_name(
    broker: BrokerProcess,
) -> None:
    # kafka-python sends IncrementalAlterConfigs where the broker offers it, and otherwise
    # fills the topic's other configs into AlterConfigs: either way only retention changes
    admin = KafkaPythonAdmin()
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("kept-configs", 1, TOPIC_CONFIGS).error_code == 0
    admin.alter_configs(broker.bootstrap, "kept-configs", {"retention.ms": "7200000"})
    configs = admin.describe_configs(broker.bootstrap, "kept-configs")
    assert (configs["retention.ms"], configs["cleanup.policy"]) == ("7200000", "compact")


def test_incremental_alter_configs_sets_deletes_and_appends(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import ResourceType

    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("stepwise", 1, {"retention.ms": "3600000"}).error_code == 0
    ConfluentAdmin().incremental_alter_configs(
        broker.bootstrap, ResourceType.TOPIC, "stepwise",
        [("SET", "segment.bytes", "100000"), ("DELETE", "retention.ms", None),
         ("APPEND", "cleanup.policy", "compact")],
    )  # fmt: skip
    configs = ConfluentAdmin().describe_configs(broker.bootstrap, "stepwise")
    assert configs["segment.bytes"] == "100000"
    assert configs["retention.ms"] == "604800000"  # Kafka's default
    assert configs["cleanup.policy"] == "delete,compact"


def test_a_bad_config_change_is_refused_and_changes_nothing(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ResourceType

    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("guarded", 1, {"retention.ms": "3600000"}).error_code == 0
    admin = ConfluentAdmin()
    for ops in (
        [("SET", "retention.ms", "soon")],
        [("SET", "no.such.config", "1")],
        [("APPEND", "retention.ms", "5")],
        [("SUBTRACT", "cleanup.policy", "delete")],  # would leave it empty
    ):
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            admin.incremental_alter_configs(broker.bootstrap, ResourceType.TOPIC, "guarded", ops)
    with pytest.raises(KafkaException, match="static"):
        admin.incremental_alter_configs(
            broker.bootstrap, ResourceType.BROKER, "0", [("SET", "num.partitions", "3")]
        )
    assert admin.describe_configs(broker.bootstrap, "guarded")["retention.ms"] == "3600000"


LONG_MAX = str(2**63 - 1)


def test_flush_configs_are_accepted_stored_and_described(broker: BrokerProcess) -> None:
    """``flush.messages`` and ``flush.ms`` are accepted as Kafka accepts them (and change
    nothing: every acknowledged record is already fsynced). Apache Kafka 4.3.1 took the
    same calls through this AdminClient with the same results, Long.MAX_VALUE being its
    default of both (bench/_kafka.py)."""
    from confluent_kafka.admin import ResourceType

    admin, bootstrap = ConfluentAdmin(), broker.bootstrap
    flush = {"flush.messages": "1", "flush.ms": "0"}
    assert admin.create_topic(bootstrap, "flushed", 1, flush) == 0
    configs = admin.describe_configs(bootstrap, "flushed")
    assert (configs["flush.messages"], configs["flush.ms"]) == ("1", "0")
    admin.incremental_alter_configs(bootstrap, ResourceType.TOPIC, "flushed",
                                    [("SET", "flush.ms", "1000"),
                                     ("DELETE", "flush.messages", None)])  # fmt: skip
    configs = admin.describe_configs(bootstrap, "flushed")
    assert (configs["flush.messages"], configs["flush.ms"]) == (LONG_MAX, "1000")
    admin.alter_configs(bootstrap, "flushed", {"flush.messages": "7"})
    configs = admin.describe_configs(bootstrap, "flushed")
    assert (configs["flush.messages"], configs["flush.ms"]) == ("7", LONG_MAX)
    config = stored_topic(broker, "flushed").config
    assert (config.flush_messages, config.flush_ms) == (7, 2**63 - 1)


@pytest.mark.parametrize(
    ("name", "value"),
    [("flush.messages", "0"), ("flush.messages", "-1"), ("flush.ms", "-1"),
     ("flush.ms", "1.5"), ("flush.ms", "9223372036854775808"), ("flush.messages", "abc")],
)  # fmt: skip
def test_flush_configs_outside_kafkas_range_are_invalid_config(
    broker: BrokerProcess, name: str, value: str
) -> None:
    """Kafka 4.3.1 refuses each of these with INVALID_CONFIG (flush.messages is a long of
    at least 1, flush.ms one of at least 0), at creation and in IncrementalAlterConfigs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ResourceType

    admin = ConfluentAdmin()
    assert admin.create_topic(broker.bootstrap, "unflushed", 1, {name: value}) == INVALID_CONFIG
    assert admin.create_topic(broker.bootstrap, "flushable", 1, {}) == 0
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        admin.incremental_alter_configs(
            broker.bootstrap, ResourceType.TOPIC, "flushable", [("SET", name, value)]
        )
    assert admin.describe_configs(broker.bootstrap, "flushable")[name] == LONG_MAX


def test_an_open_partition_uses_changed_configs_at_once(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import ResourceType

    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("live-config", 1).error_code == 0
        seed(raw, "live-config", [Rec(0, b"k", b"x" * 100, (), T0)] * 3)  # opens the partition
        ConfluentAdmin().incremental_alter_configs(
            broker.bootstrap, ResourceType.TOPIC, "live-config",
            [("SET", "segment.bytes", "1000")],
        )  # fmt: skip
        for _ in range(5):
            seed(raw, "live-config", [Rec(0, b"k", b"y" * 400, (), T0)] * 2)
    assert broker.stop() == 0
    segments = Storage(broker.data_dir).reader("live-config", 0).view().manifest.segments
    assert len(segments) >= 4  # rolled at about 1000 bytes, not at the default 1 GiB


def test_cli_alters_a_topic_through_the_broker(broker: BrokerProcess) -> None:
    import subprocess
    import sys

    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("orders", 2).error_code == 0
    out = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "topics", "alter", "orders",
         "--config", "cleanup.policy=compact", "--config", "retention.ms=1000",
         "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    configs = ConfluentAdmin().describe_configs(broker.bootstrap, "orders")
    assert (configs["cleanup.policy"], configs["retention.ms"]) == ("compact", "1000")


def test_a_topic_created_in_the_data_dir_while_the_broker_runs_is_served(
    broker: BrokerProcess,
) -> None:
    """``sparklog topics create --data-dir`` (another process) while the broker runs: the
    broker's Metadata and Produce see the topic, as Java clients expect (they would try to
    create it, and fail with TOPIC_ALREADY_EXISTS)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.list_topics(timeout=10)  # the broker has answered Metadata before the topic exists
    Storage(broker.data_dir).topics.create("offline", 3, {})
    assert len(admin.list_topics(timeout=10).topics["offline"].partitions) == 3
    p = Producer({"bootstrap.servers": broker.bootstrap, "allow.auto.create.topics": False})
    p.produce("offline", b"v", b"k")
    assert p.flush(10) == 0


def test_shrinking_a_topic_is_invalid_partitions(broker: BrokerProcess) -> None:
    """CreatePartitions below the current count is INVALID_PARTITIONS (37), and the topic
    keeps its partitions. Checked against Apache Kafka 4.3.1 (bench/_kafka.py, the same
    confluent-kafka call): 37, "The topic kept3 currently has 3 partition(s); 2 would not be
    an increase." """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("kept3", 3).error_code == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_partitions([NewPartitions("kept3", 2)])["kept3"]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert stored_topic(broker, "kept3").partitions == 3
