"""``python -m mpi4py -m hpcopt_agent ...`` (and the ``hpcopt-agent`` console script)."""

from __future__ import annotations

from hpcopt_agent.cli import entry

if __name__ == "__main__":
    entry()
