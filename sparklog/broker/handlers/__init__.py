"""One module per group of Kafka APIs. Each handler takes the request context
(``sparklog.broker.context.RequestContext``) and the parsed kio request and returns the
response as plain data (``wire.build`` fits it to the requested version), or None for "send
no response" (produce with acks=0). A refusal is a sparklog error, raised or returned, whose
Kafka code comes from the one table (``sparklog.broker.errors.error_code``).
``sparklog.broker.apis`` lists them with their versions.
"""
