"""A writer process of the create-if-absent race in tests/storage/test_fs_s3.py.

Usage: ``python s3_race_child.py <root-uri> <writer> <keys>`` with the ``AWS_*`` variables
of the server in the environment. Opens ``<root-uri>`` (``s3://bucket/prefix``) with
``S3FileSystem``, prints ``READY`` and waits for a line on stdin (the parent sends it when
every writer is ready, so that they start together), then calls
``create_exclusive("<root>/k<i>", b"writer <writer>")`` for every ``i < keys`` from four
threads, in an order of its own (shuffled by ``writer``), and prints the keys it won as one
JSON list on stdout.
"""

from __future__ import annotations

import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor

from sparklog.storage.fs.s3 import S3FileSystem


def main(uri: str, writer: int, keys: int) -> None:
    fs, root = S3FileSystem.from_uri(uri)
    order = list(range(keys))
    random.Random(writer).shuffle(order)
    print("READY", flush=True)
    sys.stdin.readline()

    def create(i: int) -> tuple[int, bool]:
        return i, fs.create_exclusive(fs.join(root, f"k{i}"), b"writer %d" % writer)

    with ThreadPoolExecutor(4) as pool:
        won = sorted(i for i, ok in pool.map(create, order) if ok)
    print(json.dumps(won), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
