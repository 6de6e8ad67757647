"""Where the suite runs: the checkout, whether this is CI, the real PostgreSQL, and how
much longer than written anything may take on this machine (one load factor for
pytest's limits and every client timeout)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("HPCOPT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parents[2]


def _load_per_core() -> float:
    return os.getloadavg()[0] / (os.cpu_count() or 1)


@functools.cache
def _start_scale() -> float:
    try:
        asked = float(os.environ.get("HPCOPT_TEST_TIMEOUT_SCALE", "1"))
    except ValueError:
        asked = 1.0
    return max(1.0, asked, _load_per_core())


def timeout_scale() -> float:
    """How much longer than written a test may take here: the larger of
    ``HPCOPT_TEST_TIMEOUT_SCALE`` (default 1), the load per core when this process
    started (its collection) and the load per core now, at most 10. A limit is a guard
    against a hang, never a speed check: on a machine loaded 6 deep per core a correct
    test ran past its fixed 300 s and failed. Pytest's per-test limits (stretched again
    as each test starts, ``tests/conftest.py``) and every timeout the tests' own clients
    use (:func:`scaled`) are stretched by this one figure, so load that arrives during
    a run stretches what starts after it."""
    return min(10.0, max(_start_scale(), _load_per_core()))


#: Markers of the tests that need a real part the fast tier (``make check``) leaves
#: out; the part's fixture or helper fails a test that uses it unmarked.
PARTS = {
    "mpi": "runs mpiexec",
    "slurm": "submits to the Slurm cluster",
    "browser": "drives chromium",
    "postgres": "needs the real PostgreSQL",
}


running_test: list[pytest.Item] = []


def require_marker(part: str) -> None:
    """Fails the running test unless it carries the marker of ``part`` (``PARTS``): the
    fast tier selects tests by these markers, so one that uses a part unmarked would
    slip into it."""
    item = running_test[0] if running_test else None
    if item is not None and item.get_closest_marker(part) is None:
        fast = "the fast tier, make check, leaves such tests out"
        pytest.fail(f"{item.nodeid} {PARTS[part]}: mark it @pytest.mark.{part} ({fast})")


def scaled(seconds: float) -> float:
    """``seconds`` stretched by :func:`timeout_scale`: what every wait, deadline and client
    timeout in the tests is written as (``tests/test_house.py`` holds it), so that a busy
    machine stretches them all as it stretches pytest's limits."""
    return seconds * timeout_scale()
