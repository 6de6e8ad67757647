"""Fixtures of the server tests that start real server processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.db import migrated_sqlite


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file for a ``tests.helpers.process.ServerProcess``."""
    url = migrated_sqlite(tmp_path / "server.db")
    return url
