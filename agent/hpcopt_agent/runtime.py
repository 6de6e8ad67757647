"""What the agent watches besides the server: signals, walltime, output context."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
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
        self.request(signal.Signals(signum).name, f"{signal.Signals(signum).name} received")

    def request(self, name: str, why: str) -> None:
        """Stop as on SIGUSR1 (the walltime's reserve calls this too)."""
        if not self.name:
            self.name = name
            log.warning("%s: stopping after this batch", why)


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


def parse_deadline(text: str) -> float:
    """Seconds from now until ``text``: an ISO 8601 time (``2026-11-29T08:00``; local
    time unless it names a zone) or Unix seconds. A time in the past is an error."""
    text = text.strip()
    try:
        at = float(text) if text.replace(".", "", 1).isdigit() else datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (give an ISO 8601 time such as 2026-11-29T08:00, or Unix seconds)"
        ) from None
    left = at - time.time()
    if left <= 0:
        raise ValueError(f"{text!r} is {-left:.0f} s in the past")
    return left


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
    """The allocation's deadline (``--time-limit`` / ``--deadline`` when given, else
    Slurm's end time of the job) and whether another trial may start.

    With the planner's prediction (:attr:`to_checkpoint`, seconds from a trial's start
    to its first checkpoint) a trial starts only if it is predicted to reach that
    checkpoint before the last ``reserve`` seconds (``hpcopt.core.planner.may_start``);
    without one, only if a trial as long as the longest so far still fits. In the last
    ``reserve`` seconds (:meth:`watch`) trials checkpoint and go back, as on SIGUSR1."""

    def __init__(self, limit: float | None, reserve: float = 60.0) -> None:
        remaining = slurm_remaining() if limit is None else limit
        self.deadline = None if remaining is None else time.monotonic() + remaining
        self.reserve = max(0.0, reserve)
        self.longest = 0.0
        self.to_checkpoint: float | None = None
        self._timer: threading.Timer | None = None

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def window(self) -> float | None:
        """The seconds trials may still train: what is left less the ``reserve`` kept for
        checkpointing and giving trials back (None without a deadline)."""
        left = self.remaining()
        return None if left is None else left - self.reserve

    def record(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)

    def fits_another(self) -> bool:
        from hpcopt.core.planner import may_start

        left = self.remaining()
        if left is None:
            return True
        if self.to_checkpoint is not None:
            return may_start(left, self.to_checkpoint, self.reserve)
        return left > 1.1 * self.longest + 5.0

    def why_not(self) -> str:
        left = self.remaining() or 0.0
        if self.to_checkpoint is not None:
            return (
                f"{left:.0f} s of walltime left: a trial is predicted to take {self.to_checkpoint:.0f} s to its "
                f"first checkpoint and the last {self.reserve:.0f} s are kept for giving trials back"
            )
        return f"{left:.0f} s of walltime left, the longest trial took {self.longest:.0f} s"

    def watch(self, stop: StopSignal) -> None:
        """At ``reserve`` seconds before the deadline, stop as on SIGUSR1."""
        left = self.remaining()
        if left is None or self.reserve <= 0:
            return
        self._timer = threading.Timer(
            max(0.0, left - self.reserve),
            stop.request,
            ("WALLTIME", f"{self.reserve:.0f} s of walltime left: checkpointing and giving trials back"),
        )
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


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
