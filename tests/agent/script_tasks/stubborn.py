"""A script that never reports, never checks should_checkpoint() and never ends: the
agent must still stop it at the walltime. It writes its pid where the test looks."""

import os
import sys
import time

from hpcopt_agent import trial  # noqa: F401 - catches SIGUSR1/SIGTERM, as any script that imports it

with open(sys.argv[1] + f".{os.environ['RANK']}", "w") as out:
    out.write(str(os.getpid()))
while True:
    time.sleep(0.2)
