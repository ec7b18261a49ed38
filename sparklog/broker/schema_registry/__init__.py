"""The Schema Registry the broker serves: ``service`` (who writes the ``_schemas`` topic and
how the state follows it), ``rest`` (Confluent's REST API over aiohttp) and ``validation``
(the produce-time check of framed schema ids, ``confluent.value.schema.validation``).

The model, normal forms and compatibility are ``sparklog.schemas``'; this package is only
the broker's side of it. See docs/schemas.md.
"""
