"""The Kafka wire-protocol broker over ``sparklog.storage``.

Owns: the protocol front (``server``: the process and its lifecycle; ``connection``: one
client connection; ``apis``: the advertised APIs and versions; ``handlers/``: one module
per group of APIs; ``context``: what a handler sees; ``errors``: the one table from errors
to Kafka codes), open partitions and their leader epochs (``partitions``), producer ids
(``producer_ids``), consumer groups (``groups``) and their committed offsets (``offsets``),
and its settings (``config``). Durability, idempotence state and leases are storage's
(``sparklog.storage``); the wire format is ``sparklog.kafka``'s. Never imports Spark or
``sparklog.datasource``, and never reads segment bytes except through ``sparklog.storage``.
"""
