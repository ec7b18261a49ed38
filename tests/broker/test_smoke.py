from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from .conftest import BrokerProcess


def test_produce_then_consume_with_confluent_kafka(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce("smoke", key=b"k", value=b"v%d" % i)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                  "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition("smoke", 0, 0)])
    got = []
    for _ in range(50):
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        if len(got) == 10:
            break
    c.close()
    assert got == [b"v%d" % i for i in range(10)]
