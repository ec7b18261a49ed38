"""The smaller Kafka API gaps of issue 16, each checked with a real client against a broker
process: per-record errors (KIP-467), explicit replica assignments, OffsetDelete (KIP-496),
authorized operations (KIP-430), DeleteRecords' error codes, the fetch size rule,
``max.compaction.lag.ms``, and static membership (KIP-345) as Kafka does it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from sparklog.kafka import wire
from sparklog.kafka.client import KafkaClient
from sparklog.kafka.records import build_batch

from .conftest import BrokerProcess


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _create(b: BrokerProcess, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = _admin(b)  # held: a destroyed client fails its futures
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)


def test_a_null_key_on_a_compacted_topic_names_the_records(broker: BrokerProcess) -> None:
    _create(broker, "compacted", **{"cleanup.policy": "compact"})
    rows = [(0, 1, b"k", b"v", []), (1, 1, None, b"v", []), (2, 1, b"k", b"v", []),
            (3, 1, None, b"v", [])]  # fmt: skip
    with KafkaClient(broker.bootstrap) as c:
        r = c.request(wire.ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": "compacted", "partition_data": [
                {"index": 0, "records": build_batch(rows)}]}],
        })  # fmt: skip
    part = r.responses[0].partition_responses[0]
    assert int(part.error_code) == 87  # INVALID_RECORD
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    assert "without key" in part.record_errors[0].batch_index_error_message


def test_explicit_replica_assignments_naming_this_broker_are_accepted(
    broker: BrokerProcess,
) -> None:
    admin = _admin(broker)
    admin.create_topics([NewTopic("placed", 3, replica_assignment=[[0], [0], [0]])])[
        "placed"
    ].result(30)
    assert len(admin.list_topics("placed", timeout=10).topics["placed"].partitions) == 3
    admin.create_partitions([NewPartitions("placed", 5, replica_assignment=[[0], [0]])])[
        "placed"
    ].result(30)
    assert len(admin.list_topics("placed", timeout=10).topics["placed"].partitions) == 5


def test_replica_assignments_naming_unknown_brokers_are_refused(broker: BrokerProcess) -> None:
    with pytest.raises(KafkaException) as e:
        admin = _admin(broker)
        admin.create_topics([NewTopic("nowhere", 2, replica_assignment=[[0], [7]])])[
            "nowhere"
        ].result(30)
    assert e.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    assert "do not exist" in e.value.args[0].str()


def _commit(b: BrokerProcess, group: str, topic: str, partitions: int) -> Consumer:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                  "enable.auto.commit": False})  # fmt: skip
    c.commit(offsets=[TopicPartition(topic, p, 5) for p in range(partitions)], asynchronous=False)
    return c


def test_offset_delete_drops_an_empty_groups_offsets(broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    _create(broker, "od", 2)
    _commit(broker, "od-group", "od", 2).close()
    with KafkaClient(broker.bootstrap) as k:  # (this confluent-kafka has no OffsetDelete)
        r = k.request(wire.ApiKey.OFFSET_DELETE, 0, {"group_id": "od-group", "topics": [
            {"name": "od", "partitions": [{"partition_index": 0}]}]})  # fmt: skip
    assert (int(r.error_code), int(r.topics[0].partitions[0].error_code)) == (0, 0)
    admin = _admin(broker)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("od-group")])[
        "od-group"
    ].result(30)
    assert {(tp.partition, tp.offset) for tp in listed.topic_partitions} == {(1, 5)}


def test_offset_delete_refuses_topics_a_live_member_subscribes_to(broker: BrokerProcess) -> None:
    _create(broker, "busy", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "busy-group",
                  "enable.auto.commit": False})  # fmt: skip
    c.subscribe(["busy"])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    c.commit(offsets=[TopicPartition("busy", 0, 3)], asynchronous=False)
    with KafkaClient(broker.bootstrap) as k:
        r = k.request(wire.ApiKey.OFFSET_DELETE, 0, {"group_id": "busy-group", "topics": [
            {"name": "busy", "partitions": [{"partition_index": 0}]}]})  # fmt: skip
        assert int(r.topics[0].partitions[0].error_code) == 86  # GROUP_SUBSCRIBED_TO_TOPIC
        r = k.request(wire.ApiKey.OFFSET_DELETE, 0, {"group_id": "no-such-group", "topics": []})
        assert int(r.error_code) == 69  # GROUP_ID_NOT_FOUND
    c.close()


def test_authorized_operations_are_every_operation_without_an_authorizer(
    broker: BrokerProcess,
) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    _create(broker, "ops")
    admin = _admin(broker)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert AclOperation.ALTER_CONFIGS in cluster.authorized_operations
    assert AclOperation.IDEMPOTENT_WRITE in cluster.authorized_operations
    topic = admin.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)[
        "ops"
    ].result(30)
    assert {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE} <= set(
        topic.authorized_operations
    )
    _commit(broker, "ops-group", "ops", 1).close()
    group = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)[
        "ops-group"
    ].result(30)
    assert set(group.authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
    }  # fmt: skip
    plain = admin.describe_cluster().result(30)
    assert not plain.authorized_operations  # not asked: not given


def test_delete_records_below_minus_one_is_offset_out_of_range(broker: BrokerProcess) -> None:
    _create(broker, "dr")
    with KafkaClient(broker.bootstrap) as c:
        r = c.request(wire.ApiKey.DELETE_RECORDS, 2, {"timeout": 5000, "topics": [
            {"name": "dr", "partitions": [{"partition_index": 0, "offset": -2}]}]})  # fmt: skip
    assert int(r.topics[0].partitions[0].error_code) == 1  # OFFSET_OUT_OF_RANGE


def test_a_fetch_exceeds_max_bytes_only_by_its_first_batch(broker: BrokerProcess) -> None:
    _create(broker, "big", 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                  "batch.size": 4 << 20, "message.max.bytes": 4 << 20})  # fmt: skip
    for part in range(3):
        for _ in range(6):
            p.produce("big", value=b"x" * 150_000, partition=part)
    p.flush(30)
    with KafkaClient(broker.bootstrap) as c:
        r = c.request(wire.ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1_000_000,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": "big", "partitions": [
                    {"partition": i, "current_leader_epoch": -1, "fetch_offset": 0,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1_000_000} for i in range(3)]}],
            "forgotten_topics_data": [], "rack_id": "",
        })  # fmt: skip
    sizes = [len(p.records or b"") for p in r.responses[0].partitions]
    assert sizes[0] > 0
    # the first partition's data may pass the limit by its first batch, no further
    assert sum(sizes) <= 1_000_000 or (sizes[1], sizes[2]) == (0, 0)


def test_max_compaction_lag_ms_is_a_topic_config(broker: BrokerProcess) -> None:
    _create(broker, "lagged", **{"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"})
    res = ConfigResource(ConfigResource.Type.TOPIC, "lagged")
    admin = _admin(broker)
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["max.compaction.lag.ms"].value == "60000"


def test_a_static_member_that_closes_and_rejoins_causes_no_rebalance(
    broker: BrokerProcess,
) -> None:
    _create(broker, "static", 2)
    events: list[tuple[str, str, list[int]]] = []

    def member(instance: str, name: str) -> Consumer:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "static-g",
                      "group.instance.id": instance, "session.timeout.ms": 30000})  # fmt: skip
        c.subscribe(
            ["static"],
            on_assign=lambda _c, ps: events.append((name, "assign", [p.partition for p in ps])),
            on_revoke=lambda _c, ps: events.append((name, "revoke", [p.partition for p in ps])),
        )
        return c

    a, b = member("a", "a"), member("b", "b")
    deadline = time.monotonic() + 30
    while len([e for e in events if e[1] == "assign"]) < 2 and time.monotonic() < deadline:
        a.poll(0.1)
        b.poll(0.1)
    a_parts = next(e[2] for e in events if e[0] == "a")
    a.close()  # a static member sends no LeaveGroup: it is expected back
    events.clear()
    a2 = member("a", "a2")
    end = time.monotonic() + 8
    while time.monotonic() < end:
        a2.poll(0.1)
        b.poll(0.1)
    assert ("a2", "assign", a_parts) in events
    assert not [e for e in events if e[0] == "b"]  # b kept its partition, untouched
    for c in (a2, b):
        c.close()


def test_delete_groups_after_static_members_close_waits_for_their_session(
    broker: BrokerProcess,
) -> None:
    _create(broker, "static2")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "static-del",
                  "group.instance.id": "only", "session.timeout.ms": 6000})  # fmt: skip
    c.subscribe(["static2"])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    c.close()
    admin = _admin(broker)
    with pytest.raises(KafkaException) as e:
        admin.delete_consumer_groups(["static-del"])["static-del"].result(30)
    assert e.value.args[0].name() == "NON_EMPTY_GROUP"  # Kafka's answer too
    time.sleep(7)  # the static member's session expires: the group is empty
    admin.delete_consumer_groups(["static-del"])["static-del"].result(30)


def test_per_broker_and_static_broker_configs_are_refused(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    admin = _admin(broker)
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    res.add_incremental_config(
        ConfigEntry("log.retention.ms", "5", incremental_operation=AlterConfigOpType.SET)
    )
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(30)
    assert e.value.args[0].name() == "INVALID_REQUEST"
    assert "--entity-default" in e.value.args[0].str()
    with KafkaClient(broker.bootstrap) as c:  # (librdkafka cannot name the default broker)
        r = c.request(wire.ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False,
            "resources": [{"resource_type": 4, "resource_name": "", "configs": [
                {"name": "num.partitions", "config_operation": 0, "value": "5"}]}]})  # fmt: skip
    assert int(r.responses[0].error_code) == 42  # INVALID_REQUEST
    assert "TOML" in r.responses[0].error_message
