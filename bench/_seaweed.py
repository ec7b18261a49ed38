"""SeaweedFS as the benchmarks' S3 server on loopback: the demo's ``weed mini``
(``sparklog.demo.seaweed.SeaweedS3``) with its Prometheus metrics on, so the object-store
requests a benchmark counts are the server's own (``SeaweedFS_s3_request_total``) and
nothing sits between the brokers and the store to count them.

    with SeaweedServer(tmp_dir) as s3:
        os.environ.update(s3.env())            # the brokers inherit the AWS_* variables
        before = s3.requests()                 # Counter: request type -> requests so far

SeaweedFS types a request by its S3 action: ``PUT`` (every part of a multipart upload
too, as S3 bills them), ``GET`` (a HEAD counts as a GET), ``LIST``, ``DELETE``.
"""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections import Counter

from sparklog.demo.seaweed import SeaweedS3

_REQUEST = re.compile(r"^SeaweedFS_s3_request_total\{([^}]*)\}\s+(\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SeaweedServer(SeaweedS3):
    """See the module docstring."""

    def __init__(self, work_dir: str, bucket: str = "sparklog-bench") -> None:
        super().__init__(work_dir, bucket)
        self.metrics_port = _free_port()

    def command(self) -> list[str]:
        return [*super().command(), f"-metricsPort={self.metrics_port}"]

    def start(self, timeout_s: float = 60.0) -> None:
        super().start(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:  # the metrics listener may come up after S3's
            try:
                self.requests()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.2)

    def requests(self) -> Counter[str]:
        """Requests the S3 gateway has answered so far, by type, every status included."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        out: Counter[str] = Counter()
        for labels, value in _REQUEST.findall(text):
            out[dict(_LABEL.findall(labels)).get("type", "?")] += int(float(value))
        return out

    def __enter__(self) -> SeaweedServer:
        self.start()
        return self
