"""The server's clock: wall time that never steps.

Leases, queue order and every stored time come from ``SteadyClock.now``. A plain
``datetime.now()`` follows the host's clock when it is stepped (an administrator, a VM
restored from a snapshot, NTP correcting a large error): a +2 h step expired every live
lease within one lease, and after a -2 h step trials "finished before they started".
This clock advances with ``time.monotonic`` from the wall time it last agreed with, and
follows a stepped wall clock only by slewing toward it at ``SLEW`` (5 %: a 2 h step is
absorbed over 40 h, while a 60 s lease lasts 57 to 63 s). Within ``SNAP`` seconds of the
wall clock it takes the wall clock as it is, so ordinary NTP slewing is followed exactly.

Each process has its own clock; processes on one host see the same steps and slew alike,
and hosts whose clocks did not step are not disturbed by one that did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

#: How fast the clock moves toward a wall clock that stepped away (seconds per second).
SLEW = 0.05
#: A difference from the wall clock this small (seconds) is taken at once.
SNAP = 1.0


class SteadyClock:
    def __init__(
        self,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._wall, self._monotonic = wall, monotonic
        self._lock = threading.Lock()
        self._at = wall()  # the time this clock last showed,
        self._mono = monotonic()  # and the monotonic reading then

    def now(self) -> datetime:
        with self._lock:
            mono, wall = self._monotonic(), self._wall()
            elapsed = max(0.0, mono - self._mono)
            steady = self._at + timedelta(seconds=elapsed)
            gap = (wall - steady).total_seconds()
            if abs(gap) <= SNAP:
                shown = wall if wall >= self._at else self._at  # never backwards
            else:
                step = max(-SLEW * elapsed, min(SLEW * elapsed, gap))
                shown = steady + timedelta(seconds=step)
            self._at, self._mono = shown, mono
            return shown


#: The clock of this process (``Context.clock``'s default).
CLOCK = SteadyClock()
