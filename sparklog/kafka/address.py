"""Addresses as Kafka writes them: ``HOST:PORT``, bootstrap lists, and listeners.

- ``parse_host_port("127.0.0.1:9092")``; the host may be empty (then 127.0.0.1) or a
  bracketed IPv6 address (``[::1]:9092``).
- ``parse_bootstrap("a:9092, b:9092")``: Kafka's ``bootstrap.servers``, a comma-separated
  list tried in order.
- ``parse_listener("PLAINTEXT://127.0.0.1:9092")``: a broker listener, Kafka's
  ``listeners`` syntax; a bare ``HOST:PORT`` means ``PLAINTEXT``. The security protocols
  are Kafka's: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``. A broker has at
  most one listener per protocol, so the protocol also names the listener (Kafka's default
  ``listener.security.protocol.map``).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
PLAINTEXT = "PLAINTEXT"
KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def uses_tls(protocol: str) -> bool:
    """Whether Kafka security protocol ``protocol`` runs over TLS."""
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    """Whether ``protocol`` authenticates with SASL."""
    return protocol.startswith("SASL_")


def parse_host_port(value: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` (ValueError otherwise)."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address must be HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or DEFAULT_HOST, int(port)


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """Every ``HOST:PORT`` of a comma-separated ``bootstrap.servers`` list, in order."""
    try:
        found = [parse_host_port(part) for part in value.split(",") if part.strip()]
    except ValueError:
        found = []
    if not found:
        raise ValueError(f"bootstrap servers must be HOST:PORT[,HOST:PORT...], got {value!r}")
    return found


@dataclass(frozen=True)
class Listener:
    """One listener of a broker: a security protocol on a host and port."""

    security_protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.security_protocol}://{self.host}:{self.port}"

    @property
    def tls(self) -> bool:
        return uses_tls(self.security_protocol)

    @property
    def sasl(self) -> bool:
        return uses_sasl(self.security_protocol)


def parse_listener(value: str) -> Listener:
    """A listener from ``[PROTOCOL://]HOST:PORT`` (see the module docstring)."""
    protocol, sep, address = value.strip().partition("://")
    if not sep:
        protocol, address = PLAINTEXT, value
    protocol = protocol.upper()
    if protocol not in KAFKA_SECURITY_PROTOCOLS:
        raise ValueError(
            f"listener {value!r}: unknown security protocol {protocol!r} "
            f"(Kafka's are {', '.join(KAFKA_SECURITY_PROTOCOLS)})"
        )
    host, port = parse_host_port(address)
    return Listener(protocol, host, port)
