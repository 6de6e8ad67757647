"""A pytest plugin for ``tests/test_timeout_scale.py``: once collection is over, the
machine reads as loaded 4 deep per core, as if another job had started during the run."""

from __future__ import annotations

import os

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    busy = 4.0 * (os.cpu_count() or 1)
    os.getloadavg = lambda: (busy, busy, busy)
