"""What the agent watches besides the server: signals, walltime, output context."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from datetime import datetime
from types import FrameType

log = logging.getLogger("hpcopt_agent")


class StopSignal:
    """Set by SIGTERM / SIGUSR1 (Slurm's ``--signal=USR1@120``): finish the batch,
    checkpoint, give the trial back as PREEMPTED, exit 0."""

    def __init__(self) -> None:
        self.name = ""

    @property
    def requested(self) -> bool:
        return bool(self.name)

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.name:
            self.name = signal.Signals(signum).name
            log.warning("%s received: stopping after this batch", self.name)


def parse_duration(text: str) -> float:
    """Seconds from ``SECONDS``, ``MM:SS``, ``HH:MM:SS`` or ``D-HH:MM:SS`` (Slurm's forms)."""
    text = text.strip()
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [float(p) for p in text.split(":")]
    if not parts or len(parts) > 3:
        raise ValueError(f"not a duration: {text!r}")
    seconds = 0.0
    for p in parts:
        seconds = seconds * 60 + p
    return days * 86400 + seconds


def slurm_remaining() -> float | None:
    """Seconds left in this Slurm job, or None outside Slurm or without a limit."""
    end = os.environ.get("SLURM_JOB_END_TIME")
    if end and end.isdigit():
        return float(end) - time.time()
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True, timeout=20, check=True
        ).stdout.strip()
        return datetime.fromisoformat(out).timestamp() - time.time()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


class Walltime:
    """The allocation's deadline (``--time-limit`` or Slurm's), and whether a trial
    that takes as long as the longest so far still fits."""

    def __init__(self, limit: float | None) -> None:
        remaining = limit if limit is not None else slurm_remaining()
        self.deadline = None if remaining is None else time.monotonic() + remaining
        self.longest = 0.0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def record(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)

    def fits_another(self) -> bool:
        left = self.remaining()
        return left is None or left > 1.1 * self.longest + 5.0


class Context(logging.Filter):
    """Puts the rank layout and the current trial/fold in front of every log line."""

    def __init__(self, rank: int, group: int) -> None:
        super().__init__()
        self.where = f"r{rank} g{group}" if group >= 0 else f"r{rank}"
        self.what = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.where = self.where
        record.what = f" {self.what}" if self.what else ""
        return True


def setup_logging(level: str, ctx: Context) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s [%(where)s]%(what)s %(message)s", "%H:%M:%S"))
    handler.addFilter(ctx)
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
