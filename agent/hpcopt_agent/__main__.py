"""``hpcopt-agent``: not built yet; says so instead of pretending to work."""

from __future__ import annotations

import sys


def main() -> int:
    print(
        "hpcopt-agent: the MPI agent is not part of this release yet; "
        "see examples/demo/simulated_agent.py for the protocol it will speak.",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
