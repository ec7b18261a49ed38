"""What connection security costs: produce and consume throughput over SASL_SSL against
PLAINTEXT on the same broker in one run (the ratio), and authentication handshakes per
second; on sparklog and on Apache Kafka 4.3.1 side by side.

Brokers (one after the other, each fresh, each with both listeners):

* sparklog: ``SASL_SSL`` and ``PLAINTEXT`` listeners (``--listen``), a ``[security]``
  table with the certificate (``authorizer = false``), the SCRAM-SHA-512 user created
  offline in its data dir (``CredentialStore.upsert``, as ``sparklog users add`` does).
* Kafka (``bench/_kafka.py``, single-node KRaft from the jars): a ``SASL_SSL`` listener
  (``sasl.enabled.mechanisms=SCRAM-SHA-512``, a PEM keystore and truststore) next to
  ``PLAINTEXT`` (also the inter-broker listener) and the controller's; the user created
  at format time (``StorageTool format --add-scram``). No authorizer either.

Both present the same certificate: a throwaway CA (``trustme``, ECDSA P-256) signs one
for 127.0.0.1; SCRAM credentials use 4,096 iterations on both. Clients trust the CA and
check the host name; TLS 1.3 is what every party negotiates.

Per broker, first an unmeasured warm-up (100k records produced and read back over each
protocol: Kafka's JIT, allocators), then ``--repeats`` times, each protocol in turn (the
order alternating between repeats), on a fresh 4-partition topic:

* produce: one confluent-kafka producer (as ``bench/produce.py``: acks=all, linger.ms=5,
  batch.size=1 MiB, no compression, no idempotence) sends ``--records`` records (16-byte
  keys from a pool of 4,096, one 100-byte random value: 116 payload bytes), timed from the
  first ``produce()`` to the end of ``flush()``. The producer has connected (and
  authenticated) to the broker before the clock starts: one record to a warm-up topic.
  Afterwards the topic's high watermarks must add up to ``--records``.
* consume: ``--consume-passes`` confluent-kafka consumers, one after another (as
  ``bench/consume.py``: 64 MiB fetches, 8 MiB per partition, a large prefetch queue; no
  group), each reading the records back: ``assign()`` at the log start of every partition,
  timed from there to the last record. Each has connected before the clock starts (the
  log start offsets asked for with a ListOffsets: no offset lookup inside the timing).

Then, per protocol, ``--connect-seconds`` of back-to-back connections by
``--connect-threads`` threads, each with sparklog's own client
(``sparklog.kafka.client.KafkaClient``, the same against both brokers): TCP connect, for
SASL_SSL the TLS handshake and a SaslHandshake + two SaslAuthenticate rounds of
SCRAM-SHA-512 (the client checks the server's signature), then one Metadata request (no
topics), close; after an unmeasured warm-up of up to 2 s. PLAINTEXT (TCP and the Metadata
request alone) is the reference. The client's PBKDF2 (4,096 rounds of HMAC-SHA-512, ~2 ms)
is on the client side of every SCRAM handshake, so the rate is a client + broker figure
on this machine; the broker's and the client's CPU time per connection are printed next
to it.

Printed: records/s and MB/s (payload, 10^6 bytes) of produce and consume, the broker's
CPU microseconds per record, connections/s and the broker's CPU milliseconds per
connection, the median of the repeats (all runs in the JSON); then SASL_SSL / PLAINTEXT
per broker and sparklog / Kafka per protocol. sparklog acks a produce after an fsync,
Kafka from the page cache (its default flush policy; ``bench/produce.py`` compares the two
policies). Before each measurement the script waits up to ``--wait-quiet`` seconds for an
idle machine.

    .venv/bin/python bench/security.py --quick     # 50k records, 1 repeat, 3 s of connects
    .venv/bin/python bench/security.py --out security.json   # 400k records, median of 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trustme
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives import serialization

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _broker import BrokerProcess, cleanup_on_signals, temp_dir
from _kafka import KafkaServer, _free_port
from _machine import load_average, self_cpu_seconds, wait_for_quiet
from _tables import fmt_table

from sparklog.kafka.client import ClientSettings, KafkaClient
from sparklog.kafka.wire import ApiKey
from sparklog.security.scram import make_credential
from sparklog.security.store import CredentialStore
from sparklog.storage import Storage

PROTOCOLS = ("PLAINTEXT", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
USER, PASSWORD = "admin", "admin-secret"
ITERATIONS = 4096
PARTITIONS = 4
KEY_SIZE, VALUE_SIZE, KEY_POOL = 16, 100, 4096
WARMUP_TOPIC = "warmup"
MIB = 1 << 20


@dataclass(frozen=True)
class Certs:
    """PEM files of one throwaway CA: its certificate, and the brokers' key (unencrypted
    PKCS#8, which Kafka's PEM keystore takes) followed by the certificate chain."""

    ca: str
    server: str


def make_certs(directory: str) -> Certs:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    server = os.path.join(directory, "broker.pem")
    Path(server).write_bytes(pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca_path = os.path.join(directory, "ca.pem")
    ca.cert_pem.write_to_path(ca_path)
    return Certs(ca_path, server)


class Peer(Protocol):
    """A broker under test, started, with both listeners."""

    def address(self, protocol: str) -> str: ...
    def cpu_seconds(self) -> float: ...
    def check_alive(self) -> None: ...


@contextmanager
def sparklog_broker(tmp: str, certs: Certs) -> Iterator[Peer]:
    data = os.path.join(tmp, "data")
    CredentialStore(Storage(data)).upsert(USER, make_credential(MECHANISM, PASSWORD, ITERATIONS))
    config = Path(tmp) / "broker.toml"
    config.write_text(
        "[security]\n"
        f'ssl_certfile = "{certs.server}"\n'
        f'ssl_keyfile = "{certs.server}"\n'
        f'sasl_mechanisms = ["{MECHANISM}"]\n'
        "authorizer = false\n"
    )
    listen = ",".join(f"{p}://127.0.0.1:0" for p in PROTOCOLS)
    broker = BrokerProcess(data, listen=listen, extra=("--config", str(config)))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        broker.kill()


class _KafkaPeer:
    def __init__(self, server: KafkaServer, sasl_port: int) -> None:
        self.server = server
        self.ports = {"PLAINTEXT": server.port, "SASL_SSL": sasl_port}

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def cpu_seconds(self) -> float:
        return self.server.cpu_seconds()

    def check_alive(self) -> None:
        self.server.check_alive()


@contextmanager
def kafka_broker(tmp: str, certs: Certs) -> Iterator[Peer]:
    sasl_port = _free_port()
    server = KafkaServer(tmp, format_args=(
        "--add-scram", f"{MECHANISM}=[name={USER},password={PASSWORD},iterations={ITERATIONS}]",
    ))  # fmt: skip
    plain, ctl = server.port, server.controller_port
    server.properties = {
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_port},"
            f"CONTROLLER://127.0.0.1:{ctl}"
        ),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certs.server,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": certs.ca,
    }
    server.start()
    try:
        yield _KafkaPeer(server, sasl_port)
    finally:
        server.stop()


# ---------------------------------------------------------------------------- clients


def client_config(peer: Peer, protocol: str, ca: str, **extra: Any) -> dict[str, Any]:
    """confluent-kafka settings for ``protocol``: TLS trusting ``ca``, SCRAM as the user."""
    conf: dict[str, Any] = {"bootstrap.servers": peer.address(protocol),
                            "security.protocol": protocol}  # fmt: skip
    if protocol == "SASL_SSL":
        conf.update({"ssl.ca.location": ca, "sasl.mechanism": MECHANISM,
                     "sasl.username": USER, "sasl.password": PASSWORD})  # fmt: skip
    return {**conf, **extra}


def producer_config(peer: Peer, protocol: str, ca: str) -> dict[str, Any]:
    return client_config(
        peer, protocol, ca, **{
            "acks": "all", "linger.ms": 5, "batch.size": MIB, "batch.num.messages": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 2 * MIB, "compression.type": "none",
            "enable.idempotence": False, "message.timeout.ms": 300_000,
        },
    )  # fmt: skip


def consumer_config(peer: Peer, protocol: str, ca: str) -> dict[str, Any]:
    return client_config(
        peer, protocol, ca, **{
            "group.id": f"bench-{time.monotonic_ns()}",  # required; never joined
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "fetch.max.bytes": 64 * MIB, "max.partition.fetch.bytes": 8 * MIB,
            "receive.message.max.bytes": 100_000_000,
            "queued.max.messages.kbytes": 256 * 1024, "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 10,
        },
    )  # fmt: skip


def settings(peer: Peer, protocol: str, ca: str) -> ClientSettings:
    """sparklog's own client, as ``client_config``."""
    sasl = protocol == "SASL_SSL"
    return ClientSettings(
        peer.address(protocol), 30.0, "bench-security",
        security_protocol=protocol, sasl_mechanism=MECHANISM,
        sasl_username=USER if sasl else None, sasl_password=PASSWORD if sasl else None,
        ssl_cafile=ca if sasl else None,
    )  # fmt: skip


def create_topics(peer: Peer, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": peer.address("PLAINTEXT"), "log_level": 5})
    for f in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        f.result(60)


def workload() -> tuple[list[bytes], bytes]:
    """The key pool and the value (random bytes)."""
    return [os.urandom(KEY_SIZE) for _ in range(KEY_POOL)], os.urandom(VALUE_SIZE)


# ---------------------------------------------------------------------------- measurements


@dataclass
class Run:
    """One timed measurement: how much, how long, and whose CPU."""

    count: int
    seconds: float
    broker_cpu: float
    client_cpu: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.count / self.seconds


@dataclass
class Figures:
    """Every run of one (broker, protocol)."""

    produce: list[Run] = field(default_factory=list)
    consume: list[Run] = field(default_factory=list)
    connect: list[Run] = field(default_factory=list)


def _measured(peer: Peer, body: Callable[[], tuple[int, float]], note: str) -> Run:
    cpu0, bcpu0 = self_cpu_seconds(), peer.cpu_seconds()
    count, seconds = body()
    return Run(count, seconds, peer.cpu_seconds() - bcpu0, self_cpu_seconds() - cpu0, note)


def produce(peer: Peer, protocol: str, ca: str, topic: str, n: int, wait: float) -> Run:
    keys, value = workload()
    p = Producer(producer_config(peer, protocol, ca))
    p.produce(WARMUP_TOPIC, value=b"warm-up")  # connected to the leader before the clock
    assert p.flush(60) == 0
    note = wait_for_quiet(wait)

    def body() -> tuple[int, float]:
        produce_, poll = p.produce, p.poll
        t0 = time.perf_counter()
        for i in range(n):
            key = keys[i % KEY_POOL]
            while True:
                try:
                    produce_(topic, value, key)
                    break
                except BufferError:
                    poll(0.005)
        if p.flush(300) != 0:
            raise RuntimeError(f"{protocol}: records still unacknowledged after 300 s")
        return n, time.perf_counter() - t0

    run = _measured(peer, body, note)
    c = Consumer(consumer_config(peer, "PLAINTEXT", ca))  # a check: not what is measured
    try:
        stored = sum(c.get_watermark_offsets(TopicPartition(topic, i), 30)[1]
                     for i in range(PARTITIONS))  # fmt: skip
    finally:
        c.close()
    if stored != n:
        raise RuntimeError(f"{protocol}: {topic} holds {stored:,} records, {n:,} were sent")
    return run


def consume(peer: Peer, protocol: str, ca: str, topic: str, n: int, wait: float) -> Run:
    c = Consumer(consumer_config(peer, protocol, ca))
    try:
        # not timed: connected to the leader (a ListOffsets), the offsets to start at known
        tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
        starts = [c.get_watermark_offsets(tp, 30)[0] for tp in tps]
        note = wait_for_quiet(wait)

        def body() -> tuple[int, float]:
            clock, consume_ = time.perf_counter, c.consume
            t0 = last = clock()
            c.assign([TopicPartition(topic, i, o) for i, o in enumerate(starts)])
            count = 0
            while count < n:
                msgs = consume_(10_000, 1.0)
                if msgs:
                    for m in msgs:
                        if m.error() is not None:
                            raise RuntimeError(f"{protocol}: consume error {m.error()}")
                    count += len(msgs)
                    last = clock()
                else:
                    peer.check_alive()
                    if clock() - last > 60:
                        raise RuntimeError(f"{protocol}: stuck at {count:,} of {n:,} records")
            return count, last - t0

        return _measured(peer, body, note)
    finally:
        c.close()


def connect(peer: Peer, protocol: str, ca: str, seconds: float, threads: int,
            wait: float) -> Run:  # fmt: skip
    conf = settings(peer, protocol, ca)
    metadata = {"topics": [], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}  # fmt: skip
    counts = [0] * threads
    errors: list[BaseException] = []

    def worker(i: int, deadline: float) -> None:
        try:
            while time.perf_counter() < deadline:
                with KafkaClient(conf) as client:
                    client.request(ApiKey.METADATA, 12, metadata)
                counts[i] += 1
        except BaseException as e:  # re-raised by the measuring thread
            errors.append(e)

    def body(seconds: float = seconds) -> tuple[int, float]:
        counts[:] = [0] * threads
        t0 = time.perf_counter()
        pool = [threading.Thread(target=worker, args=(i, t0 + seconds)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{protocol}: a connection failed: {errors[0]!r}")
        return sum(counts), elapsed

    body(min(2.0, seconds / 3))  # warm-up, not timed (Kafka's JIT)
    note = wait_for_quiet(wait)
    return _measured(peer, body, note)


def measure(peer: Peer, certs: Certs, args: argparse.Namespace) -> dict[str, Figures]:
    figures = {p: Figures() for p in PROTOCOLS}
    names = [f"bench-{p.lower()}-{r}" for r in range(args.repeats) for p in PROTOCOLS]
    warm = {p: f"warm-{p.lower()}" for p in PROTOCOLS}
    create_topics(peer, [WARMUP_TOPIC, *warm.values(), *names])
    for protocol, topic in warm.items():  # not measured: JIT, allocators, page cache
        n = min(args.records, 100_000)
        produce(peer, protocol, certs.ca, topic, n, 0)
        consume(peer, protocol, certs.ca, topic, n, 0)
    for r in range(args.repeats):
        order = PROTOCOLS if r % 2 == 0 else PROTOCOLS[::-1]
        for protocol in order:
            topic = f"bench-{protocol.lower()}-{r}"
            f = figures[protocol]
            f.produce.append(
                produce(peer, protocol, certs.ca, topic, args.records, args.wait_quiet)
            )
            reads = [consume(peer, protocol, certs.ca, topic, args.records, args.wait_quiet)
                     for _ in range(args.consume_passes)]  # fmt: skip
            f.consume.extend(reads)
            done = ", ".join(f"{x.rate:,.0f}" for x in reads)
            print(f"    repeat {r + 1} {protocol:9s}: produce {f.produce[-1].rate:>9,.0f}, "
                  f"consume {done} records/s", flush=True)  # fmt: skip
    for protocol in PROTOCOLS:
        run = connect(peer, protocol, certs.ca, args.connect_seconds, args.connect_threads,
                      args.wait_quiet)  # fmt: skip
        figures[protocol].connect.append(run)
        print(f"    {protocol:9s}: {run.rate:,.0f} connections/s "
              f"({run.count:,} in {run.seconds:.1f} s)", flush=True)  # fmt: skip
    return figures


# ---------------------------------------------------------------------------- report


def _median(runs: list[Run], key: Callable[[Run], float]) -> float:
    return statistics.median(key(r) for r in runs)


def summary(figures: Figures) -> dict[str, float]:
    mb = (KEY_SIZE + VALUE_SIZE) / 1e6
    p, c, k = figures.produce, figures.consume, figures.connect
    return {
        "produce_records_s": _median(p, lambda r: r.rate),
        "produce_mb_s": _median(p, lambda r: r.rate * mb),
        "produce_broker_cpu_us_per_record": _median(p, lambda r: r.broker_cpu / r.count * 1e6),
        "consume_records_s": _median(c, lambda r: r.rate),
        "consume_mb_s": _median(c, lambda r: r.rate * mb),
        "consume_broker_cpu_us_per_record": _median(c, lambda r: r.broker_cpu / r.count * 1e6),
        "connections_s": _median(k, lambda r: r.rate),
        "connect_broker_cpu_ms": _median(k, lambda r: r.broker_cpu / r.count * 1e3),
        "connect_client_cpu_ms": _median(k, lambda r: r.client_cpu / r.count * 1e3),
    }


RATIO_KEYS = {"produce": "produce_records_s", "consume": "consume_records_s",
              "connections": "connections_s"}  # fmt: skip


def report(results: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> str:
    rows = []
    for broker, by_protocol in results.items():
        for protocol, s in by_protocol.items():
            rows.append([
                broker, protocol,
                f"{s['produce_records_s']:,.0f}", f"{s['produce_mb_s']:.1f}",
                f"{s['produce_broker_cpu_us_per_record']:.1f}",
                f"{s['consume_records_s']:,.0f}", f"{s['consume_mb_s']:.1f}",
                f"{s['consume_broker_cpu_us_per_record']:.1f}",
                f"{s['connections_s']:,.0f}", f"{s['connect_broker_cpu_ms']:.2f}",
                f"{s['connect_client_cpu_ms']:.2f}",
            ])  # fmt: skip
    headers = ["broker", "protocol", "produce rec/s", "MB/s", "cpu us/rec",
               "consume rec/s", "MB/s", "cpu us/rec", "conn/s", "cpu ms/conn",
               "client ms/conn"]  # fmt: skip
    out = [
        f"{args.records:,} records of {KEY_SIZE + VALUE_SIZE} bytes, 4 partitions, "
        f"median of {args.repeats}; connections: {args.connect_threads} thread(s) x "
        f"{args.connect_seconds:g} s; cpu = the broker's CPU (client ms/conn: this process)",
        fmt_table(headers, rows, left=(0, 1)),
        "",
        "SASL_SSL / PLAINTEXT",
    ]
    for broker, by_protocol in results.items():
        sec, plain = by_protocol["SASL_SSL"], by_protocol["PLAINTEXT"]
        parts = [f"{name} {sec[key] / plain[key]:.2f}" for name, key in RATIO_KEYS.items()]
        out.append(f"  {broker:9s} " + "  ".join(parts))
    if "kafka" in results:
        out.append("sparklog / Kafka")
        for protocol in PROTOCOLS:
            ours, theirs = results["sparklog"][protocol], results["kafka"][protocol]
            parts = [f"{n} {ours[k] / theirs[k]:.2f}" for n, k in RATIO_KEYS.items()]
            out.append(f"  {protocol:9s} " + "  ".join(parts))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--consume-passes", type=int, default=3,
                    help="consumers reading each produced topic, one after another")  # fmt: skip
    ap.add_argument("--connect-seconds", type=float, default=10.0)
    ap.add_argument("--connect-threads", type=int, default=2)
    ap.add_argument("--wait-quiet", type=float, default=10.0,
                    help="at most this many seconds of waiting for an idle machine")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="50k records, 1 repeat, 3 s of connects")
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--tmp", default=None, help="where the temp dirs go (default: $TMPDIR)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.repeats, args.connect_seconds = 50_000, 1, 3.0
    cleanup_on_signals()
    brokers: dict[str, Callable[[str, Certs], Any]] = {"sparklog": sparklog_broker}
    if not args.no_kafka:
        brokers["kafka"] = kafka_broker
    started = time.monotonic()
    raw: dict[str, dict[str, Figures]] = {}
    with temp_dir("secbench-", args.tmp) as tmp:
        certs = make_certs(tmp)
        for name, start in brokers.items():
            print(f"{name}:", flush=True)
            work = os.path.join(tmp, name)
            os.makedirs(work)
            with start(work, certs) as peer:
                raw[name] = measure(peer, certs, args)
    results = {b: {p: summary(f) for p, f in by.items()} for b, by in raw.items()}
    print()
    print(report(results, args))
    elapsed = time.monotonic() - started
    print(f"\n{platform.node()}: {os.cpu_count()} cores, load {load_average()}, "
          f"{elapsed:.0f} s in all")  # fmt: skip
    if args.out:
        doc = {
            "settings": {k: v for k, v in vars(args).items() if k != "out"},
            "record_bytes": KEY_SIZE + VALUE_SIZE, "partitions": PARTITIONS,
            "mechanism": MECHANISM, "scram_iterations": ITERATIONS,
            "results": results,
            "runs": {b: {p: asdict(f) for p, f in by.items()} for b, by in raw.items()},
        }  # fmt: skip
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
