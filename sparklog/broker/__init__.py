"""The Kafka wire-protocol broker over ``sparklog.storage``, in four rooms.

- The protocol front (this package's modules): ``server`` (the process and its
  lifecycle), ``connection`` (one client connection), ``apis`` (the advertised APIs and
  versions), ``handlers/`` (one module per group of APIs; they translate requests and
  responses), ``context`` (what a handler sees), ``append`` (the append service: what
  becomes of produced records), ``errors`` (the one table from errors to Kafka codes),
  ``partitions`` (open partitions and their leader epochs), ``replicas``
  (what Metadata reports as replicas), ``membership`` (a cluster-mode broker's session),
  ``authorization`` and ``config`` (its settings).
- ``coordinators/``: the group coordinator, committed group offsets, transactions,
  producer ids.
- ``schema_registry/``: the Schema Registry's service, REST API and produce-time validation.
- ``observability/``: ``/metrics`` and consumer lag.

Durability, idempotence state and leases are storage's (``sparklog.storage``); the wire
format is ``sparklog.kafka``'s. Never imports Spark or ``sparklog.datasource``, and never
reads segment bytes except through ``sparklog.storage``.
"""
