"""A broker with the ack fence off, for ``bench/cluster.py`` only: what the fence costs.

    python bench/_unfenced_broker.py broker start [the flags of ``sparklog broker start``]

It builds the broker as ``sparklog broker start`` does, but in code, with
``Broker(config, ack_fence=False)`` (``sparklog.broker.server``): a cluster-mode broker
then acknowledges writes without confirming its leader epoch in etcd, so a zombie could
acknowledge writes its successor never holds. No setting or flag of sparklog turns the
fence off; this script ships with the benchmarks, not with the package. The test kit runs
it with ``BrokerCluster(..., launcher=(path of this file,))`` (``sparklog_testkit.processes``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from sparklog.broker.server import run
from sparklog.cli.broker import broker_config
from sparklog.cli.command import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] != ["broker", "start"]:
        print(f"usage: {sys.argv[0]} broker start [FLAGS of sparklog broker start]",
              file=sys.stderr)  # fmt: skip
        return 2
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # as sparklog.cli.main
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run(broker_config(args), ack_fence=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
