"""The script's process on one rank: started in a session (process group) of its own with
a socket pair to its agent rank, its output copied to the agent's with a prefix (stderr's
tail and the last metrics line kept), and stopped as a whole."""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import IO

from hpcopt_agent.script.channel import Channel

#: The line a script may print instead of calling ``trial.report``: the prefix, a space
#: and a JSON object of metrics (the last such line counts).
METRICS_PREFIX = "hpcopt-metrics "
#: The exit code a rank reports when its script could not even start.
NOT_STARTED = -1000
#: Lines of a script's stderr kept for a failure's message.
TAIL_LINES = 30
#: Environment variables of the agent's own MPI or Slurm task that describe the agent's
#: rank, not the script's: left out of the script's environment (so a script that
#: imports mpi4py, or Lightning's Slurm detection, does not take them for its own).
TASK_VARIABLES = (
    "PMI_",
    "PMIX_",
    "OMPI_",
    "HYDRA_",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
)


@dataclass
class ScriptProcess:
    """The script process of this rank, with what it printed that the agent keeps."""

    proc: subprocess.Popen[bytes]
    channel: Channel
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    metrics_line: str = ""
    pumps: list[threading.Thread] = field(default_factory=list)

    def pump(self, stream: IO[bytes], out: IO[str], prefix: str, keep: bool) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            if keep:
                self.tail.append(line[:2000])
            elif line.startswith(METRICS_PREFIX):
                self.metrics_line = line
            out.write(f"{prefix}{line}\n")
            out.flush()

    def stop(self, patience: float = 10.0) -> None:
        """Terminates the script's process group (its DataLoader workers too) if it runs."""
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, patience), (signal.SIGKILL, 30.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        for t in self.pumps:
            t.join(timeout=5)
        self.channel.close()


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def launch(argv: list[str], env: dict[str, str], prefix: str) -> ScriptProcess:
    """Starts ``argv`` with ``env`` (its channel's end in ``HPCOPT_TRIAL_FD``); each line
    it prints goes to the agent's output after ``prefix``."""
    ours, theirs = socket.socketpair()
    env["HPCOPT_TRIAL_FD"] = str(theirs.fileno())
    try:
        proc = subprocess.Popen(
            argv,
            env=env,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: stopped as a whole
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    child = ScriptProcess(proc, Channel(ours))
    for stream, out, keep in ((proc.stdout, sys.stdout, False), (proc.stderr, sys.stderr, True)):
        assert stream is not None
        t = threading.Thread(target=child.pump, args=(stream, out, prefix, keep), daemon=True)
        t.start()
        child.pumps.append(t)
    return child


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def threads() -> int:
    import torch

    return torch.get_num_threads()


__all__ = [
    "METRICS_PREFIX",
    "NOT_STARTED",
    "TASK_VARIABLES",
    "ScriptProcess",
    "exit_text",
    "free_port",
    "launch",
    "threads",
]
