"""Schemas: a Schema Registry compatible with Confluent's REST API, stored in the log.

``model`` (what a registered schema is), ``formats`` (parsing and normal forms of Avro
and JSON Schema), ``compatibility`` (Avro through ``avro.compatibility``, JSON Schema
through ``jsoncompat``, built on ``jsonkeywords``: what one schema's keywords say),
``registry`` (the registry's state as a replay of the ``_schemas`` topic, and every
change it makes as records), ``source`` (where readers and
writers get schemas: the storage root's ``_schemas`` topic or a registry's REST API),
``codec`` (framed values ⇄ Arrow). The broker serves the REST API
(``sparklog.broker.schema_registry.service``); docs/schemas.md.
"""
