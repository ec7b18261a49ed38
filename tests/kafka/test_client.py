"""sparklog's own Kafka client against a real broker: settings, bootstrap fallback, errors."""

from __future__ import annotations

import socket

import pytest

from sparklog.errors import KafkaConnectionError, KafkaRequestError
from sparklog.kafka import admin
from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog_testkit.processes import BrokerProcess


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_settings_come_from_the_kafka_options_spark_passes() -> None:
    s = ClientSettings.from_options(
        {"kafka.bootstrap.servers": "h:1,h:2", "kafka.client.id": "job-7", "topic": "t"}
    )
    assert (s.bootstrap, s.client_id) == ("h:1,h:2", "job-7")
    with pytest.raises(ValueError, match="bootstrap.servers"):
        ClientSettings.from_options({"topic": "t"})
    with pytest.raises(ValueError, match="HOST:PORT"):
        ClientSettings("no-port")


def test_the_client_tries_each_bootstrap_server_in_turn(broker: BrokerProcess) -> None:
    settings = ClientSettings(f"127.0.0.1:{_closed_port()},{broker.bootstrap}", timeout_s=5)
    with KafkaClient(settings) as c:
        admin.create_topic(c, "via-second", 2, {})
        assert admin.topic_partitions(c, "via-second") == [0, 1]


def test_no_reachable_broker_is_a_connection_error_naming_each_address() -> None:
    port = _closed_port()
    with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}"):
        KafkaClient(ClientSettings(f"127.0.0.1:{port}", timeout_s=2))


def test_a_refused_request_carries_the_brokers_error_code(broker: BrokerProcess) -> None:
    with KafkaClient(broker.bootstrap) as c:
        admin.create_topic(c, "twice", 1, {})
        with pytest.raises(KafkaRequestError, match="TOPIC_ALREADY_EXISTS") as e:
            admin.create_topic(c, "twice", 1, {})
    assert e.value.code == 36
