"""The exit codes of every sparklog command line, in one table.

The ``sparklog`` command, the Spark jobs that ``spark-submit.sh`` runs (retention,
compaction, export, the demo) and the scheduler all exit with one of these, and the
scheduler reads its jobs' codes by the same names. argparse exits with ``USAGE`` (2) on
its own for a malformed argument, and 0 for ``--help``. docs/cli.md prints this table.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """A command line's exit status; ``MEANINGS`` says what each one means."""

    OK = 0
    FAILED = 1
    USAGE = 2
    RETRY = 3


MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done (for a job: every partition compacted, skipped as not worth it, "
    "retained or exported)",
    ExitCode.FAILED: "failed: one line on stderr says why (a refused request, a storage, etcd "
    "or Spark error); retention and compaction leave each partition's old or new segment set",
    ExitCode.USAGE: "bad arguments: a malformed or contradictory option, an unknown topic "
    "given to a job, a storage root or Spark session that cannot run the job",
    ExitCode.RETRY: "try again later (compaction): another job holds the topic's "
    "compaction lease, or an input segment was swapped out while the job ran; nothing of "
    "that partition was committed",
}
