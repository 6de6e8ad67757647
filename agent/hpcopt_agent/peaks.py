"""A process's peak resident memory, per epoch: what ``peak_host_memory_mb`` reports.

Linux keeps a process's high-water mark of resident memory (``VmHWM`` in
``/proc/<pid>/status``) and resets it to the current size when ``5`` is written to
``/proc/<pid>/clear_refs`` (proc(5)). The agent resets its own at the start of each
epoch and reads it at the epoch's end, so a fold's peak is its largest epoch's, not the
largest of everything the agent ran before it. Where ``/proc`` has neither (not Linux),
the process's lifetime peak (``getrusage``) stands in.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from pathlib import Path

MIB = 2**20


def reset_host_peak(pid: int | str = "self") -> None:
    """Starts a new high-water mark of ``pid``'s resident memory (nothing where it cannot)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def host_peak_mb(pid: int | str = "self") -> float:
    """``pid``'s peak resident memory since its last reset (MiB); 0 where unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / MIB
    except (OSError, ValueError, IndexError):
        pass
    if pid != "self":
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return float(peak) / (MIB if sys.platform == "darwin" else 1024)
