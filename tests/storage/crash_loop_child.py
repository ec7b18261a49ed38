"""The writer process that tests/storage/test_crash_loop.py SIGKILLs over and over.

Usage: ``python crash_loop_child.py <root> <incarnation>``. Opens partition ``t-0`` under
``<root>`` (64 KiB segments, so rolls and seals happen between kills), resumes its writer
sequence after the last record actually in the log, then appends batches forever with
durable appends. Every record carries its identity: value ``b"<writer_seq>"``, key
``b"<incarnation>"``. Lines on stdout, each flushed as soon as it is true:

    STARTING                  imports done, about to open (and recover) the log
    READY <next_seq>          the log is open; appends start at writer_seq <next_seq>
    ACK <base> <last>         an append of offsets base..last returned (durable)
"""

from __future__ import annotations

import random
import sys

from sparklog.storage.config import TopicConfig
from sparklog.storage.fs.local import LocalFileSystem
from sparklog.storage.log import PartitionLog
from sparklog.storage.records import make_records

SEGMENT_BYTES = 64 * 1024
MAX_BATCH = 120


def next_writer_seq(log: PartitionLog) -> int:
    """One past the writer sequence of the last record in the log (0 if it is empty)."""
    end = log.high_watermark
    if end == log.log_start_offset:
        return 0
    last = log.read(end - 1)[-1]
    value = last.column("value")[last.num_rows - 1].as_py()
    return int(value) + 1


def main() -> None:
    root, incarnation = sys.argv[1], int(sys.argv[2])
    print("STARTING", flush=True)
    config = TopicConfig(segment_bytes=SEGMENT_BYTES)
    log = PartitionLog.open(LocalFileSystem(), root, "t", 0, config)
    seq = next_writer_seq(log)
    print("READY", seq, flush=True)
    rng = random.Random(incarnation)
    key = b"%d" % incarnation
    while True:
        n = rng.randint(1, MAX_BATCH)
        batch = make_records([b"%d" % s for s in range(seq, seq + n)], keys=[key] * n)
        result = log.append(batch)
        print("ACK", result.base_offset, result.last_offset, flush=True)
        seq += n


if __name__ == "__main__":
    main()
