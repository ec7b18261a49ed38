"""``python -m sparklog.cli``: the ``sparklog`` command."""

from __future__ import annotations

import sys

from sparklog.cli.command import main

if __name__ == "__main__":
    sys.exit(main())
