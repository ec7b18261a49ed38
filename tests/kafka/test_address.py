"""Addresses as Kafka writes them: HOST:PORT, bootstrap lists, listeners."""

from __future__ import annotations

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.kafka.address import Listener, parse_bootstrap, parse_host_port, parse_listener


def test_host_port_and_its_defaults() -> None:
    assert parse_host_port("broker-1:9092") == ("broker-1", 9092)
    assert parse_host_port(":9092") == ("127.0.0.1", 9092)
    assert parse_host_port("[::1]:9093") == ("::1", 9093)


@pytest.mark.parametrize("bad", ["9092", "host:", "host:port", "host:70000", ""])
def test_a_bad_address_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_host_port(bad)


def test_bootstrap_servers_are_a_list_in_order() -> None:
    assert parse_bootstrap("a:1, b:2,,c:3") == [("a", 1), ("b", 2), ("c", 3)]
    with pytest.raises(ValueError, match="bootstrap"):
        parse_bootstrap(" , ")


def test_a_listener_names_its_security_protocol() -> None:
    assert parse_listener("127.0.0.1:9092") == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_listener("plaintext://h:1") == Listener("PLAINTEXT", "h", 1)
    assert str(parse_listener("h:1")) == "PLAINTEXT://h:1"


def test_kafkas_security_protocols_are_listeners_and_others_are_refused_by_name() -> None:
    assert parse_listener("sasl_ssl://h:9093") == Listener("SASL_SSL", "h", 9093)
    assert parse_listener("SASL_SSL://h:9093").tls and parse_listener("SSL://h:1").tls
    assert parse_listener("SASL_PLAINTEXT://h:1").sasl and not parse_listener("SSL://h:1").sasl
    with pytest.raises(ValueError, match="unknown security protocol 'HTTP'"):
        parse_listener("http://h:80")


def test_the_broker_listens_on_a_listener() -> None:
    config = BrokerConfig(listen="PLAINTEXT://127.0.0.1:0")
    assert config.host_port == ("127.0.0.1", 0)
    with pytest.raises(ValueError, match="ssl_certfile"):
        BrokerConfig(listen="SSL://127.0.0.1:9093")
    with pytest.raises(ValueError, match="one listener per security protocol"):
        BrokerConfig(listen=("PLAINTEXT://127.0.0.1:1", "PLAINTEXT://127.0.0.1:2"))


def test_a_bootstrap_without_a_port_is_called_a_bootstrap_error() -> None:
    with pytest.raises(ValueError, match=r"bootstrap servers must be HOST:PORT\[,HOST:PORT...\]"):
        parse_bootstrap("127.0.0.1")
