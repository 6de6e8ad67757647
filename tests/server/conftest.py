"""Fixtures of the server tests that start real server processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcopt_server.storage.migrate import upgrade


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A migrated SQLite file for a ``tests.helpers.process.ServerProcess``."""
    url = f"sqlite:///{tmp_path / 'server.db'}"
    upgrade(url)
    return url
