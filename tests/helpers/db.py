"""Migrated SQLite databases, quickly: the migrations run once per process into a
template that each caller gets a copy of (running them took 0.2-1.2 s a test, and
hundreds of tests take a fresh database; the migrations' own tests run them themselves).
PostgreSQL's template is the ``_migrated_pg`` fixture (``tests/conftest.py``)."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path


@functools.cache
def _template() -> Path:
    from hpcopt_server.storage.migrate import upgrade

    path = Path(tempfile.mkdtemp(prefix="migrated-")) / "hpcopt.db"
    upgrade(f"sqlite:///{path}")
    # Nothing of it outside the one file (a WAL left beside it would not be copied).
    assert [p.name for p in path.parent.iterdir()] == [path.name], list(path.parent.iterdir())
    return path


def migrated_sqlite(path: Path) -> str:
    """The URL of a new SQLite file at ``path``, at the head revision."""
    shutil.copyfile(_template(), path)
    return f"sqlite:///{path}"
