"""The streaming sink's state in a query's checkpoint: ``SinkState``, ``StateStore``.

Sink state, per task: ``<checkpointLocation>/sparklog-sink/<task partition id>/``
holding ``identity.json`` — the task's producer id and epoch, created (create-if-absent)
before its first record is sent, so a replay of the very first batch uses them too::

    {"format": 1, "producer_id": 1003, "producer_epoch": 0}

and ``<batch id, 20 digits>.json`` after each batch, each created once, never changed::

    {"format": 1, "batch": 7, "producer_id": 1003, "producer_epoch": 0,
     "next_sequence": {"orders": {"0": 5120, "3": 77}}}

The two newest batch files per task are kept; older ones are deleted.

Written by the sink's tasks (``sparklog.datasource.writer``): the identity before a task's
first record is sent, a batch file after the task wrote its batch (crash point
``sink.after_state`` lies after it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from sparklog.errors import CorruptMetadataError
from sparklog.storage.fs import FileSystem
from sparklog.storage.store import filesystem_for
from sparklog.storage.versioned import VersionedFiles

#: the sink state's directory in a query's checkpoint
STATE_DIR = "sparklog-sink"
IDENTITY_FILE = "identity.json"
#: batch files kept per task
KEEP_STATES = 2


@dataclass(frozen=True)
class SinkState:
    """One task's producer identity after a batch (format in the module docstring)."""

    batch: int
    producer_id: int
    producer_epoch: int
    next_sequence: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        seqs = {t: {str(p): s for p, s in ps.items()} for t, ps in self.next_sequence.items()}
        return json.dumps(
            {
                "format": 1,
                "batch": self.batch,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "next_sequence": seqs,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> SinkState:
        try:
            d = json.loads(data)
            if d.get("format") != 1:
                raise ValueError(f"unknown format {d.get('format')}")
            return cls(
                int(d["batch"]),
                int(d["producer_id"]),
                int(d["producer_epoch"]),
                {
                    t: {int(p): int(s) for p, s in ps.items()}
                    for t, ps in d["next_sequence"].items()
                },
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptMetadataError(f"{where}: unreadable sink state: {e}") from e


class StateStore:
    """The sink state files of one task (``<state_dir>/<task>/``): batch states are the
    versions of a ``VersionedFiles`` directory (version = batch id), each created once."""

    def __init__(self, state_dir: str, task: int) -> None:
        self.fs: FileSystem
        self.fs, base = filesystem_for(state_dir)
        self.dir = self.fs.join(base, str(task))
        self._states = VersionedFiles(self.fs, self.dir)

    def latest(self) -> SinkState | None:
        found = self._states.latest()
        if found is None:
            return None
        batch, data = found
        return SinkState.from_json(data, self._states.path(batch))

    def identity(self, allocate: Callable[[], tuple[int, int]]) -> tuple[int, int]:
        """The task's producer id and epoch: the recorded ones, else ``allocate()``'s,
        recorded before anything is sent with them."""
        path = self.fs.join(self.dir, IDENTITY_FILE)
        if not self.fs.exists(path):
            pid, epoch = allocate()
            self.fs.makedirs(self.dir)
            doc = {"format": 1, "producer_id": pid, "producer_epoch": epoch}
            # False: a concurrent attempt of this task recorded its own first; use that
            self.fs.create_exclusive(path, json.dumps(doc).encode())
        try:
            d = json.loads(self.fs.read_bytes(path))
            return int(d["producer_id"]), int(d["producer_epoch"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{path}: unreadable sink identity: {e}") from e

    def save(self, state: SinkState) -> None:
        self.fs.makedirs(self.dir)
        # False: a concurrent attempt of this task (speculation) wrote the same batch first
        self._states.try_commit(state.batch, state.to_json())
        for old in self._states.versions()[:-KEEP_STATES]:
            self._states.delete(old)
