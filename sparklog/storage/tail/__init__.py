"""The log's tail on object storage: what a broker whose root is in a bucket writes instead
of fsyncing its active segments.

Pieces (design and reasons: docs/object-storage.md):
- ``objects``: the round object format (one object per flush round, every partition's new
  bytes in it) and ``TailEntry``, one committed chunk;
- ``rounds``: ``RoundWriter``, a broker's one writer of rounds (cut every ``flush_ms``,
  uploaded in parallel, committed in order), and ``PartitionTail``, a log's place in it;
- ``embedded``: the committer of a broker without etcd (the round's creation commits);
  ``sparklog.cluster.tail`` is a cluster broker's (one etcd transaction per round that
  commits and fences);
- ``rebuild``: a partition's cache files rebuilt from its committed chunks before it opens;
- ``gc``: round objects nobody references removed after a delay.

``BrokerTail`` ties a committer to its round writer for ``PartitionLog``.

A topic's tail is kept under its *tail key*, ``<name>@<topic id>`` (``tail_key``), not its
name: a topic deleted and created again under the same name has a new id, so it never
finds the old topic's chunks or claims. The broker names each topic's key before it opens
a partition (``BrokerTail.name_topic``, from the topic metadata it just read), and tails
of deleted topics are forgotten (``TailStore.forget``) when the topic is deleted and by a
sweep (``sparklog.broker.object_storage.forget_deleted_topics``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

from sparklog.errors import SparkLogError
from sparklog.storage.active import ActiveSegment
from sparklog.storage.checkpoints import LogPosition
from sparklog.storage.manifest import Manifest
from sparklog.storage.tail.fetch import SharedFetch
from sparklog.storage.tail.objects import Claimed, TailEntry
from sparklog.storage.tail.rounds import PartitionTail, RoundWriter, TailCommitter

__all__ = [
    "BrokerTail",
    "Claimed",
    "LogTail",
    "PartitionTail",
    "TailEntry",
    "TailStore",
    "tail_key",
    "topic_of",
]


def tail_key(topic: str, topic_id: str) -> str:
    """The key a topic's tail is kept under (module docstring): ``orders@<topic id>``."""
    return f"{topic}@{topic_id}"


def topic_of(key: str) -> tuple[str, str] | None:
    """(topic name, topic id) of a tail key; None for a key that is not one."""
    name, at, topic_id = key.rpartition("@")
    return (name, topic_id) if at and name and topic_id else None


class TailStore(TailCommitter, Protocol):
    """A committer that also keeps the committed chunks: claims and drops them."""

    writer: str

    def claim(self, topic: str, partition: int, epoch: int) -> Claimed:
        """Fence older writers of the partition (a cluster's take-over: every earlier
        claim, of an older epoch or of this one) and return its committed chunks."""
        ...

    def drop(self, topic: str, partition: int, epoch: int, claim: str, through: int) -> bool:
        """Forget the chunks that end at or below offset ``through`` (sealed), if the
        claim is still the partition's."""
        ...

    def topic_keys(self) -> set[str]:
        """The tail key of every topic that has chunks or claims here."""
        ...

    def forget(self, topic: str) -> None:
        """Forget everything of the tail key ``topic`` (a deleted topic's): its chunks and
        claims. A writer still committing to it afterwards is refused (cluster) or its
        chunks are never claimed again (embedded)."""
        ...


class BrokerTail:
    """A broker's tail: its committer (``store``) and its ``RoundWriter``."""

    def __init__(
        self,
        store: TailStore,
        *,
        flush_ms: int,
        flush_bytes: int,
        timeout_ms: int,
        max_in_flight: int = 4,
        max_chunks: int = 256,
    ) -> None:
        self.store = store
        #: the cache rebuilds of this broker's take-overs, read together (``fetch``)
        self.fetches = SharedFetch()
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, int], str] = {}
        self._keys: dict[str, str] = {}  # topic name -> tail key
        self.rounds = RoundWriter(
            store,
            flush_ms=flush_ms,
            flush_bytes=flush_bytes,
            max_in_flight=max_in_flight,
            timeout_ms=timeout_ms,
            max_chunks=max_chunks,
            writer=store.writer,
        )

    def name_topic(self, topic: str, topic_id: str) -> None:
        """Keep ``topic``'s tail under ``tail_key(topic, topic_id)`` from now on (the
        broker calls it with the metadata it opens a partition by)."""
        with self._lock:
            self._keys[topic] = tail_key(topic, topic_id)

    def key(self, topic: str) -> str:
        """``topic``'s tail key (its name itself until ``name_topic`` named it)."""
        with self._lock:
            return self._keys.get(topic, topic)

    def claim(self, topic: str, partition: int, epoch: int) -> list[TailEntry]:
        """The store's claim (``TailStore.claim``); its token is kept for ``register``."""
        got = self.store.claim(self.key(topic), partition, epoch)
        with self._lock:
            self._tokens[(topic, partition)] = got.token
        return got.entries

    def register(
        self, topic: str, partition: int, epoch: int, active: ActiveSegment
    ) -> PartitionTail:
        """The log's place in the rounds, from its active segment's end (all committed:
        the log just opened from the committed tail), under the partition's last claim."""
        committed = LogPosition(active.base_offset, active.size, active.next_offset)
        with self._lock:
            token = self._tokens.pop((topic, partition), "")
        return self.rounds.register(self.key(topic), partition, epoch, active, committed, token)

    def attach(self, topic: str, partition: int, epoch: int, active: ActiveSegment) -> LogTail:
        """A log's link to this tail (``register``, with the drops of its seals)."""
        return LogTail(self, self.register(topic, partition, epoch, active))

    def drop(self, topic: str, partition: int, epoch: int, claim: str, through: int) -> None:
        # a chunk not dropped is dropped by the next seal's drop, or the next leader's
        with contextlib.suppress(SparkLogError):
            self.store.drop(topic, partition, epoch, claim, through)

    def close(self) -> None:
        self.rounds.close()
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


class LogTail:
    """What a ``PartitionLog`` on object storage holds: its place in the broker's rounds
    (``PartitionTail``: ``appended``, ``wait``, ``switch``, ``fail``, ``full``) and the drop of the
    chunks its seals make redundant."""

    def __init__(self, broker: BrokerTail, tail: PartitionTail) -> None:
        self.broker = broker
        self.tail = tail
        self.appended = tail.appended
        self.wait = tail.wait
        self.switch = tail.switch
        self.fail = tail.fail
        self.full = tail.full

    def drop_sealed(self, manifest: Manifest) -> None:
        """Drop the chunks below the manifest's first unsealed segment."""
        through = next((s.base_offset for s in manifest.segments if not s.sealed), None)
        if through is not None:
            t = self.tail
            self.broker.drop(t.topic, t.partition, t.epoch, t.claim, through)
