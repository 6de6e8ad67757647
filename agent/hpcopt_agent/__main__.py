"""``python -m mpi4py -m hpcopt_agent ...`` (and the ``hpcopt-agent`` console script)."""

from __future__ import annotations

import sys

from hpcopt_agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
