"""Idempotent producers: no duplicates under real retries, and the protocol rules behind it.

Retries are injected for real, two ways: a TCP proxy in front of the broker that forwards a
produce request, waits for the broker's answer and then drops the connection instead of
forwarding it (so the client must resend a request the broker already carried out); and
SIGKILL + restart of the broker while a producer has requests in flight. Then the rules,
with hand-built record batches through the raw client: a retried batch gets its original
offsets and is written once, a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an older
epoch is INVALID_PRODUCER_EPOCH, and the state survives a restart (SIGTERM and SIGKILL).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, Producer

from sparklog.kafka import wire
from sparklog.storage import Storage, names
from sparklog.storage.crashpoints import CRASH_EXIT_CODE

from .conftest import BrokerProcess
from .rawclient import RawClient, parse_response, record_batch

PRODUCE, METADATA = 0, 3
NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 0, 45, 47
DUPLICATE_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID = 46, 59


def stored(data_dir: str, topic: str, partition: int) -> dict[str, list[Any]]:
    """Columns of one partition in storage (the broker is stopped)."""
    view = Storage(data_dir).reader(topic, partition).view()
    table = pa.Table.from_batches(list(view.batches(view.log_start_offset)))
    return {
        name: table.column(name).to_pylist()
        for name in ("offset", "value", "producer_id", "producer_epoch", "sequence")
    }


# ---------------------------------------------------------------------------- the proxy


class DroppingProxy:
    """A TCP proxy on 127.0.0.1 in front of a broker, served by its own event loop thread.

    Metadata responses are rewritten to name the proxy, so clients keep coming back
    through it. The response to every ``drop_every``-th produce request (at most
    ``max_drops`` of them) is read from the broker and then not forwarded: the proxy closes
    the client's connection instead, so the client must resend a request the broker has
    already carried out.
    """

    def __init__(self, upstream_port: int, *, drop_every: int, max_drops: int) -> None:
        self.upstream_port = upstream_port
        self.drop_every = drop_every
        self.max_drops = max_drops
        self.produce_requests = 0
        self.drops = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> DroppingProxy:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(5)
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _drop_this_one(self) -> bool:
        self.produce_requests += 1
        if self.drops < self.max_drops and self.produce_requests % self.drop_every == 0:
            self.drops += 1
            return True
        return False

    def _rewrite_metadata(self, frame: bytes, version: int) -> bytes:
        correlation, body = parse_response(frame, METADATA, version)
        brokers = tuple(
            dataclasses.replace(b, host="127.0.0.1", port=self.port) for b in body.brokers
        )
        body = dataclasses.replace(body, brokers=brokers)
        return wire.encode_response(METADATA, version, correlation, body)[4:]

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        uwriter: asyncio.StreamWriter | None = None
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)

            async def requests() -> None:
                assert uwriter is not None
                while True:
                    size = await creader.readexactly(4)
                    frame = await creader.readexactly(struct.unpack(">i", size)[0])
                    key, version, correlation = struct.unpack_from(">hhi", frame)
                    pending[correlation] = (key, version)
                    uwriter.write(size + frame)
                    await uwriter.drain()

            async def responses() -> None:
                while True:
                    size = await ureader.readexactly(4)
                    frame = await ureader.readexactly(struct.unpack(">i", size)[0])
                    key, version = pending.pop(struct.unpack_from(">i", frame)[0])
                    if key == PRODUCE and self._drop_this_one():
                        return  # the broker did it; the client never hears
                    if key == METADATA:
                        frame = self._rewrite_metadata(frame, version)
                    cwriter.write(struct.pack(">i", len(frame)) + frame)
                    await cwriter.drain()

            both = {asyncio.ensure_future(requests()), asyncio.ensure_future(responses())}
            try:
                await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in both:
                    t.cancel()
                await asyncio.gather(*both, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            cwriter.close()
            if uwriter is not None:
                uwriter.close()
            self._tasks.discard(task)


# ---------------------------------------------------------------------------- real clients

N_PARTITIONS = 2


def values_for(partition: int, n: int, tag: str) -> list[bytes]:
    return [f"{tag}-p{partition}-{i:05d}".encode() for i in range(n)]


def producer_config(bootstrap: str, idempotent: bool, errors: list[KafkaError]) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": idempotent,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 25,
        "max.in.flight.requests.per.connection": 5,
        "message.timeout.ms": 60_000,  # never time out: a timeout would allow duplicates
        "retry.backoff.ms": 10,
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 200,
        "socket.timeout.ms": 10_000,
        "error_cb": errors.append,
    }


def produce_through_proxy(broker: BrokerProcess, idempotent: bool, n: int) -> DroppingProxy:
    errors: list[KafkaError] = []
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("retried", N_PARTITIONS).error_code == 0
    with DroppingProxy(broker.port, drop_every=3, max_drops=6) as proxy:
        p = Producer(producer_config(proxy.bootstrap, idempotent, errors))
        delivered: list[Any] = []
        values = [values_for(partition, n, "v") for partition in range(N_PARTITIONS)]
        try:
            for i in range(n):
                for partition in range(N_PARTITIONS):
                    p.produce(
                        "retried",
                        value=values[partition][i],
                        partition=partition,
                        on_delivery=lambda err, msg: delivered.append(err or msg.offset()),
                    )
                if i % 50 == 0:
                    p.poll(0)
                    time.sleep(0.005)  # several requests, so that several get dropped
            assert p.flush(30) == 0
        finally:
            p.close()
    assert not any(e.fatal() for e in errors), errors
    assert all(isinstance(d, int) for d in delivered), [
        d for d in delivered if not isinstance(d, int)
    ]
    assert proxy.drops == proxy.max_drops  # the retries really happened
    return proxy


def test_idempotent_producer_writes_each_record_once_when_responses_are_lost(
    broker: BrokerProcess,
) -> None:
    n = 400
    produce_through_proxy(broker, idempotent=True, n=n)
    assert broker.stop() == 0
    for partition in range(N_PARTITIONS):
        got = stored(broker.data_dir, "retried", partition)
        assert got["value"] == values_for(partition, n, "v")
        assert got["offset"] == list(range(n))
        assert got["sequence"] == list(range(n))
        assert len(set(got["producer_id"])) == 1 and got["producer_id"][0] >= 0


def test_without_idempotence_lost_responses_do_duplicate(broker: BrokerProcess) -> None:
    # the control: the same faults without idempotence write records twice, so the test
    # above shows the broker's deduplication, not a fault that never happened
    n = 400
    produce_through_proxy(broker, idempotent=False, n=n)
    assert broker.stop() == 0
    dups = 0
    for partition in range(N_PARTITIONS):
        got = stored(broker.data_dir, "retried", partition)
        assert set(got["value"]) == set(values_for(partition, n, "v"))
        dups += len(got["value"]) - n
    assert dups > 0


def test_idempotent_producer_writes_each_record_once_across_broker_kills(
    broker: BrokerProcess,
) -> None:
    rounds, per_round = 3, 300
    errors: list[KafkaError] = []
    stats: list[dict[str, Any]] = []
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("killed", N_PARTITIONS).error_code == 0
    config = producer_config(broker.bootstrap, True, errors)
    config["statistics.interval.ms"] = 100
    config["stats_cb"] = lambda s: stats.append(json.loads(s))
    p = Producer(config)
    expected: dict[int, list[bytes]] = {q: [] for q in range(N_PARTITIONS)}
    delivered: list[Any] = []
    try:
        for r in range(rounds):
            for i in range(per_round):
                partition = i % N_PARTITIONS
                value = f"r{r}-{i:05d}".encode()
                expected[partition].append(value)
                p.produce(
                    "killed",
                    value=value,
                    partition=partition,
                    on_delivery=lambda e, m: delivered.append(e),
                )
            # kill as soon as this round's first batch is acknowledged: the rest is in flight
            goal = len(delivered) + 1
            for _ in range(1000):
                if len(delivered) >= goal:
                    break
                p.poll(0.005)
            broker.kill()
            broker.restart()
        assert p.flush(30) == 0
        p.poll(0.3)  # one more statistics report
    finally:
        p.close()
    assert not any(e.fatal() for e in errors), errors
    assert not any(delivered), [e for e in delivered if e]
    # librdkafka counts every message it transmits, resent ones again
    parts = stats[-1]["topics"]["killed"]["partitions"]
    resent = sum(parts[str(q)]["txmsgs"] - parts[str(q)]["msgs"] for q in range(N_PARTITIONS))
    assert resent > 0  # requests really were resent
    assert broker.stop() == 0
    for partition in range(N_PARTITIONS):
        got = stored(broker.data_dir, "killed", partition)
        assert Counter(got["value"]) == Counter(expected[partition])  # each exactly once
        assert got["value"] == expected[partition]  # in order


# ---------------------------------------------------------------------------- the rules


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient.connect(broker.bootstrap) as client:
        assert client.create_topic("idem", 1).error_code == 0
        yield client


def batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return record_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_retried_batch_gets_its_original_offset_and_is_written_once(
    broker: BrokerProcess, raw: RawClient
) -> None:
    pid, epoch = raw.init_producer_id()
    first = raw.produce("idem", 0, batch(pid, epoch, 0, [b"a", b"b"]))
    second = raw.produce("idem", 0, batch(pid, epoch, 2, [b"c"]))
    retry = raw.produce("idem", 0, batch(pid, epoch, 0, [b"a", b"b"]))
    assert (first.error_code, first.base_offset) == (NONE, 0)
    assert (second.error_code, second.base_offset) == (NONE, 2)
    assert (retry.error_code, retry.base_offset) == (NONE, 0)
    raw.close()
    assert broker.stop() == 0
    got = stored(broker.data_dir, "idem", 0)
    assert got["value"] == [b"a", b"b", b"c"]
    assert got["sequence"] == [0, 1, 2]
    assert got["producer_id"] == [pid] * 3


@pytest.mark.parametrize("back", [1, 2, 3, 4, 5])
def test_each_of_the_last_five_batches_is_recognised_as_a_retry(raw: RawClient, back: int) -> None:
    pid, epoch = raw.init_producer_id()
    for i in range(6):
        assert raw.produce("idem", 0, batch(pid, epoch, 2 * i, [b"x", b"y"])).error_code == NONE
    i = 6 - back
    retry = raw.produce("idem", 0, batch(pid, epoch, 2 * i, [b"x", b"y"]))
    assert (retry.error_code, retry.base_offset) == (NONE, 2 * i)
    after = raw.produce("idem", 0, batch(pid, epoch, 12, [b"z"]))
    assert (after.error_code, after.base_offset) == (NONE, 12)  # nothing was appended


def test_retry_older_than_the_last_five_batches_is_a_duplicate_sequence(
    broker: BrokerProcess, raw: RawClient
) -> None:
    # only the last five batches keep their offsets; an older one is known to be written
    # (DUPLICATE_SEQUENCE_NUMBER, which producers take as success) and is not appended
    pid, epoch = raw.init_producer_id()
    for i in range(6):
        assert raw.produce("idem", 0, batch(pid, epoch, 2 * i, [b"x", b"y"])).error_code == NONE
    old = raw.produce("idem", 0, batch(pid, epoch, 0, [b"x", b"y"]))
    assert (old.error_code, old.base_offset) == (DUPLICATE_SEQUENCE_NUMBER, -1)
    straddling = raw.produce("idem", 0, batch(pid, epoch, 11, [b"y", b"z"]))
    assert straddling.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    after = raw.produce("idem", 0, batch(pid, epoch, 12, [b"z"]))
    assert (after.error_code, after.base_offset) == (NONE, 12)


def test_sequence_gap_is_out_of_order(raw: RawClient) -> None:
    pid, epoch = raw.init_producer_id()
    assert raw.produce("idem", 0, batch(pid, epoch, 0, [b"a", b"b"])).error_code == NONE
    gap = raw.produce("idem", 0, batch(pid, epoch, 3, [b"d"]))
    assert (gap.error_code, gap.base_offset) == (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    ok = raw.produce("idem", 0, batch(pid, epoch, 2, [b"c"]))
    assert (ok.error_code, ok.base_offset) == (NONE, 2)


def test_new_producer_must_start_at_sequence_zero(raw: RawClient) -> None:
    pid, epoch = raw.init_producer_id()
    late = raw.produce("idem", 0, batch(pid, epoch, 5, [b"a"]))
    assert late.error_code == UNKNOWN_PRODUCER_ID


def test_older_epoch_after_newer_is_fenced(raw: RawClient) -> None:
    pid, epoch = raw.init_producer_id()
    assert raw.produce("idem", 0, batch(pid, epoch, 0, [b"a"])).error_code == NONE
    # KIP-360: the producer asks for its epoch to be bumped
    resp = raw.request(
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60_000,
            "producer_id": pid,
            "producer_epoch": epoch,
        },
    )
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (NONE, pid, epoch + 1)
    newer = raw.produce("idem", 0, batch(pid, epoch + 1, 0, [b"b"]))
    assert (newer.error_code, newer.base_offset) == (NONE, 1)
    older = raw.produce("idem", 0, batch(pid, epoch, 1, [b"c"]))
    assert (older.error_code, older.base_offset) == (INVALID_PRODUCER_EPOCH, -1)


def test_new_epoch_must_start_at_sequence_zero(raw: RawClient) -> None:
    pid, epoch = raw.init_producer_id()
    assert raw.produce("idem", 0, batch(pid, epoch, 0, [b"a"])).error_code == NONE
    bumped = raw.produce("idem", 0, batch(pid, epoch + 1, 1, [b"b"]))
    assert bumped.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequences_are_per_partition(broker: BrokerProcess) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("two", 2).error_code == 0
        pid, epoch = raw.init_producer_id()
        for partition in (0, 1):
            part = raw.produce("two", partition, batch(pid, epoch, 0, [b"a", b"b"]))
            assert (part.error_code, part.base_offset) == (NONE, 0)
        part = raw.produce("two", 1, batch(pid, epoch, 2, [b"c"]))
        assert (part.error_code, part.base_offset) == (NONE, 2)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_producer_ids_are_not_reused_after_a_restart(broker: BrokerProcess, how: str) -> None:
    with RawClient.connect(broker.bootstrap) as raw:
        before = {raw.init_producer_id()[0] for _ in range(3)}
    if how == "sigkill":
        broker.kill()
    else:
        assert broker.stop() == 0
    broker.restart()
    with RawClient.connect(broker.bootstrap) as raw:
        after = {raw.init_producer_id()[0] for _ in range(3)}
    assert len(before) == len(after) == 3
    assert before.isdisjoint(after)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
@pytest.mark.parametrize("segment_bytes", [None, "400"], ids=["one-segment", "rolling"])
def test_producer_state_survives_a_restart(
    broker: BrokerProcess, how: str, segment_bytes: str | None
) -> None:
    configs = {"segment.bytes": segment_bytes} if segment_bytes else {}
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("durable", 1, configs).error_code == 0
        pid, epoch = raw.init_producer_id()
        for i in range(8):
            part = raw.produce("durable", 0, batch(pid, epoch, 3 * i, [b"v%d" % i] * 3))
            assert (part.error_code, part.base_offset) == (NONE, 3 * i)
    if how == "sigkill":
        broker.kill()
    else:
        assert broker.stop() == 0
    broker.restart()
    with RawClient.connect(broker.bootstrap) as raw:
        retry = raw.produce("durable", 0, batch(pid, epoch, 21, [b"v7"] * 3))
        assert (retry.error_code, retry.base_offset) == (NONE, 21)
        gap = raw.produce("durable", 0, batch(pid, epoch, 25, [b"gap"]))
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = raw.produce("durable", 0, batch(pid, epoch, 24, [b"next"]))
        assert (nxt.error_code, nxt.base_offset) == (NONE, 24)
    assert broker.stop() == 0
    got = stored(broker.data_dir, "durable", 0)
    assert got["value"] == [b"v%d" % i for i in range(8) for _ in range(3)] + [b"next"]
    assert got["sequence"] == list(range(25))


def test_producer_state_rebuilt_from_sealed_segments_still_recognises_retries(
    broker: BrokerProcess,
) -> None:
    # An unreadable producer-state snapshot is rebuilt from the log (partitions.py
    # _load_producers). Sealed segments are Parquet row groups, which no longer show where
    # one produce batch ended and the next began; a retry of any of the last five batches
    # must still be answered as a duplicate, as it is with the snapshot.
    n = 12
    with RawClient.connect(broker.bootstrap) as raw:
        # several batches per segment, and segments that roll and get sealed
        assert raw.create_topic("rebuilt", 1, {"segment.bytes": "10000"}).error_code == 0
        pid, epoch = raw.init_producer_id()
        for i in range(n):
            part = raw.produce("rebuilt", 0, batch(pid, epoch, 3 * i, [b"v%d" % i] * 3))
            assert (part.error_code, part.base_offset) == (NONE, 3 * i)
    assert broker.stop() == 0
    reader = Storage(broker.data_dir).reader("rebuilt", 0)
    assert any(info.sealed for info in reader.view().manifest.segments)
    with open(f"{reader.path}/{names.PRODUCER_STATE_FILE}", "wb") as f:
        f.write(b"{not json")
    broker.restart()
    with RawClient.connect(broker.bootstrap) as raw:
        answers = []
        for i in range(n - 5, n):
            part = raw.produce("rebuilt", 0, batch(pid, epoch, 3 * i, [b"v%d" % i] * 3))
            answers.append((i, part.error_code, part.base_offset))
    assert answers == [(i, NONE, 3 * i) for i in range(n - 5, n)]


def test_producer_state_after_a_crash_mid_roll_still_recognises_retries(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The broker dies between a roll's manifest commit and its producer snapshot
    # (SPARKLOG_CRASH_AT, sparklog/storage/crashpoints.py): on restart the rolled segment
    # is sealed and producer state is replayed from it. A retry of any of the last five
    # acknowledged batches - which a pipelining client sends when it lost their answers
    # with the connection - must be answered as a duplicate.
    broker.kill()
    monkeypatch.setenv("SPARKLOG_CRASH_AT", "roll.after_commit")
    broker.restart()
    monkeypatch.delenv("SPARKLOG_CRASH_AT")
    acked: list[int] = []
    with RawClient.connect(broker.bootstrap) as raw:
        assert raw.create_topic("crashed", 1, {"segment.bytes": "8000"}).error_code == 0
        pid, epoch = raw.init_producer_id()
        with pytest.raises(ConnectionError):  # the batch that rolls the segment
            for i in range(100):
                part = raw.produce("crashed", 0, batch(pid, epoch, 3 * i, [b"v%d" % i] * 3))
                assert (part.error_code, part.base_offset) == (NONE, 3 * i)
                acked.append(i)
    assert broker.proc is not None and broker.proc.wait(10) == CRASH_EXIT_CODE
    assert len(acked) >= 5
    broker.restart()
    with RawClient.connect(broker.bootstrap) as raw:
        answers = []
        for i in acked[-5:]:
            part = raw.produce("crashed", 0, batch(pid, epoch, 3 * i, [b"v%d" % i] * 3))
            answers.append((i, part.error_code, part.base_offset))
        assert answers == [(i, NONE, 3 * i) for i in acked[-5:]]
        lost = len(acked)  # the batch the crash interrupted is written now, once
        part = raw.produce("crashed", 0, batch(pid, epoch, 3 * lost, [b"v%d" % lost] * 3))
        assert (part.error_code, part.base_offset) == (NONE, 3 * lost)
