"""One lock between the tests that add or remove network interfaces (the slow-link
harness's namespaces and veth pairs) and the browser tests. Chromium answers a change
of the machine's interfaces by failing the loads it has in flight with
ERR_NETWORK_CHANGED, and with two pytest workers a dashboard test once overlapped a
slow-link test and failed so. Interface changes hold the lock exclusively, an open page
shares it."""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "hpcopt-tests-network.lock"


@contextlib.contextmanager
def network_lock(*, exclusive: bool) -> Iterator[None]:
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
