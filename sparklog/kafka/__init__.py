"""The Kafka protocol pieces more than one side of sparklog uses.

The broker and the Spark DataSource both build on this package and never import each
other. ``ls`` is the map: ``wire`` (framing and message (de)serialisation over kio, and the
API keys), ``records`` (the one Arrow <-> Kafka record-batch codec), ``client`` (sparklog's
own blocking client and ``ClientSettings``, the one place for how to connect), ``admin``
(topic, offset, group and producer-id calls over it), ``partitioner`` (Kafka's murmur2 key
partitioner), ``address`` (``HOST:PORT``, bootstrap lists, listeners).
"""
