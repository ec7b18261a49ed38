"""Kafka wire-protocol broker over ``sparklog.storage``.

Owns: offset assignment, the single writer per partition, idempotent-producer state,
groups and committed offsets, leader leases. Never reads segment bytes except through
``sparklog.storage``. Built by the broker issue; this package is intentionally empty until then.
"""
