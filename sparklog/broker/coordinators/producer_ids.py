"""Producer ids for idempotent producers (InitProducerId).

``ProducerIdAllocator`` hands out ids from blocks of ``ID_BLOCK`` reserved durably in
``<root>/producer-ids.json`` (``{"next_block": N}``, fsynced with its directory) before any
id of the block is handed out, so no id is ever handed out twice, across restarts and
crashes (a crash wastes the rest of a block). The per-partition state of each producer
(epochs, sequences) lives beside the log: ``sparklog.storage.producers``.
"""

from __future__ import annotations

import json
import threading

from sparklog.errors import CorruptMetadataError
from sparklog.storage import names
from sparklog.storage.fs import FileSystem

ID_BLOCK = 1000


class ProducerIdAllocator:
    """Hands out producer ids; blocks of ``ID_BLOCK`` are reserved durably first."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root
        self.path = fs.join(root, names.PRODUCER_IDS_FILE)
        self._lock = threading.Lock()
        self._next = 0
        self._limit = 0

    def _reserve(self) -> None:
        start = 0
        try:
            start = int(json.loads(self.fs.read_bytes(self.path))["next_block"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{self.path}: unreadable: {e}") from e
        self.fs.write_atomic(self.path, json.dumps({"next_block": start + ID_BLOCK}).encode())
        self.fs.sync_file(self.path)
        self.fs.sync_dir(self.root)
        self._next, self._limit = start, start + ID_BLOCK

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._limit:
                self._reserve()
            pid = self._next
            self._next += 1
            return pid
