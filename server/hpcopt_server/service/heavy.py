"""Costly reads share a few slots, server-wide (per process), so that readers cannot
take the server's memory or CPU from the agents.

Importance, the dashboard's plot data, the CSV and the JSON export each cost seconds and
tens to hundreds of MB on a large campaign, and any read token may ask for them: a
handful of concurrent permutation-importance requests took a server past 7 GB and the
kernel killed it. Each such computation takes a slot for its whole work (the JSON
export: until it is encoded); a request that finds none free within ``wait`` seconds is
refused with QuotaExceeded (429 with Retry-After, gRPC RESOURCE_EXHAUSTED). Identical
requests share one computation before they get here (``shared_answers.py``). Agent
calls never take a slot.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hpcopt_server.errors import QuotaExceeded

#: Costly reads running at once in one server process.
SLOTS = 2
#: Seconds a request waits for a slot before it is refused.
WAIT = 2.0
#: What a refusal tells the client to wait, in seconds.
RETRY_AFTER = 5


class HeavySlots:
    def __init__(self, slots: int = SLOTS, wait: float = WAIT):
        self.slots, self.wait = slots, wait
        self._free = threading.BoundedSemaphore(slots)

    @contextmanager
    def slot(self, what: str) -> Iterator[None]:
        """Holds a slot for the block; QuotaExceeded naming ``what`` if none frees up in time."""
        if not self._free.acquire(timeout=self.wait):
            raise QuotaExceeded(
                f"{self.slots} costly reads (importance, plot data, exports) are already running on this server; "
                f"retry the {what} shortly",
                retry_after=RETRY_AFTER,
            )
        try:
            yield
        finally:
            self._free.release()
