"""The broker fixture of tests/broker, for the client tests here."""

from tests.broker.conftest import broker

__all__ = ["broker"]
