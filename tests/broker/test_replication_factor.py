"""Replication factor on a local storage root (one copy): what CreateTopics accepts through
confluent-kafka's AdminClient and kafka-python, and what Metadata reports as replicas and
ISR. The rule itself (``sparklog.broker.replicas``) is checked without a broker for both
kinds of storage.

Kafka's answers were checked against Apache Kafka 4.3.1 (one KRaft node from
``bench/_kafka.py``) with confluent-kafka's ``AdminClient.create_topics``: replication
factor 3 gives INVALID_REPLICATION_FACTOR (38) "Unable to replicate the partition 3
time(s): The target replication factor of 3 cannot be reached because only 1 broker(s)
are registered or some brokers have all their log directories cordoned.", also with
``validate_only``; 0 gives "Replication factor must be larger than 0, or -1 to use the
default value."; 1 and -1 create the topic, whose partition then lists replicas [1] and
ISR [1]."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.replicas import check_replication_factor, in_sync, reported
from sparklog.errors import InvalidReplicationFactorError
from sparklog.storage.fs.arrow import ArrowFileSystem
from sparklog.storage.fs.local import LocalFileSystem

from .conftest import BrokerProcess


def create(broker: BrokerProcess, topic: str, factor: int, validate_only: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, 2, factor)], validate_only=validate_only)
    futures[topic].result(30)


def refusal(broker: BrokerProcess, topic: str, factor: int, **kw: bool) -> KafkaError:
    with pytest.raises(Exception) as e:
        create(broker, topic, factor, **kw)
    err = e.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def test_replication_factor_1_creates_the_topic(broker: BrokerProcess) -> None:
    create(broker, "rf-one", 1)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("rf-one", timeout=10)
    assert len(md.topics["rf-one"].partitions) == 2


def test_the_default_replication_factor_creates_the_topic(broker: BrokerProcess) -> None:
    create(broker, "rf-default", -1)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("rf-default")
    assert len(md.topics["rf-default"].partitions) == 2


def test_replication_factor_3_is_refused_and_says_the_root_is_one_local_copy(
    broker: BrokerProcess,
) -> None:
    err = refusal(broker, "rf-three", 3)
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "Replication factor 3" in err.str() and "single local copy" in err.str()
    assert "redundancy comes from the storage" in err.str()
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert "rf-three" not in md.topics


def test_replication_factor_3_is_refused_by_a_validate_only_request(
    broker: BrokerProcess,
) -> None:
    err = refusal(broker, "rf-three-v", 3, validate_only=True)
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_replication_factor_0_is_refused_with_kafkas_message(broker: BrokerProcess) -> None:
    err = refusal(broker, "rf-zero", 0)
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert err.str() == "Replication factor must be larger than 0, or -1 to use the default value."


def test_kafka_python_admin_gets_the_same_refusal(broker: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import InvalidReplicationFactorError as KafkaPythonError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(KafkaPythonError):
            admin.create_topics([KNewTopic("rf-kp", 1, 3)])
        admin.create_topics([KNewTopic("rf-kp", 1, 1)])
        assert "rf-kp" in admin.list_topics()
    finally:
        admin.close()


def test_metadata_reports_one_replica_in_sync_the_broker_itself(broker: BrokerProcess) -> None:
    create(broker, "rf-md", 1)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("rf-md", timeout=10)
    for p in md.topics["rf-md"].partitions.values():
        assert p.replicas == p.isrs == [p.leader]


# ------------------------------------------------------------- the rule, per storage kind


def test_a_local_disk_and_in_memory_arrow_storage_are_one_copy() -> None:
    import pyarrow.fs as pafs

    assert LocalFileSystem().redundant is False
    assert ArrowFileSystem(pafs.LocalFileSystem()).redundant is False
    assert ArrowFileSystem(pafs._MockFileSystem()).redundant is False


@pytest.mark.parametrize("factor", [-1, 1])
def test_one_copy_accepts_1_and_the_default(factor: int) -> None:
    assert check_replication_factor(factor, redundant=False, live_brokers=3) == 1


def test_one_copy_refuses_more_however_many_brokers_are_live() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="single local copy"):
        check_replication_factor(3, redundant=False, live_brokers=3)


def test_redundant_storage_accepts_up_to_the_live_brokers() -> None:
    assert check_replication_factor(3, redundant=True, live_brokers=3) == 3
    assert check_replication_factor(-1, redundant=True, live_brokers=3) == 1


def test_redundant_storage_refuses_more_than_the_live_brokers_as_kafka_does() -> None:
    with pytest.raises(InvalidReplicationFactorError) as e:
        check_replication_factor(3, redundant=True, live_brokers=1)
    assert str(e.value) == (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 1 broker(s) are registered."
    )


def test_one_copy_reports_the_leader_alone_redundant_storage_where_it_is_placed() -> None:
    assert reported(2, (1, 2, 3), redundant=False) == [2]
    assert reported(-1, (), redundant=False) == []
    assert reported(2, (1, 2, 3), redundant=True) == [1, 2, 3]
    assert in_sync([1, 2, 3], {2, 3}) == [2, 3]
