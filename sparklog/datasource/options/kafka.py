"""The Kafka client options of ``format("sparklog")``, reads and writes alike:
``kafka.bootstrap.servers`` and Kafka's security options (``kafka.security.protocol``,
``kafka.sasl.*``, ``kafka.ssl.*``), as Spark's Kafka source and sink take them."""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.errors import OptionError
from sparklog.kafka.client import ClientSettings


def client_settings(opts: Mapping[str, str], client_id: str) -> ClientSettings | None:
    """The broker settings of lower-cased ``opts``, or None without a bootstrap server."""
    if not opts.get("kafka.bootstrap.servers", "").strip():
        return None
    try:
        return ClientSettings.from_options(opts, client_id=client_id)
    except ValueError as e:
        raise OptionError(
            f"Kafka client options (kafka.bootstrap.servers, kafka.security.*, "
            f"kafka.sasl.*, kafka.ssl.*): {e}"
        ) from None
