"""Alembic, driven from code: ``hpcopt-server db upgrade`` and ``serve`` call these."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Brings the schema to ``revision`` (creating it in an empty database)."""
    command.upgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    """The database's schema revision, or None for an empty database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


class SchemaMismatch(RuntimeError):
    """The database's schema is another release's: ``hpcopt-server db upgrade`` first."""


def ensure_schema(url: str, current: str | None) -> None:
    """Creates the schema in an empty database (``current`` None); refuses a database at
    another revision than this release's, saying how to upgrade it."""
    head = head_revision()
    if current is None:
        upgrade(url)
    elif current != head:
        raise SchemaMismatch(
            f"the database schema is at {current}, this release needs {head}: "
            f"run `hpcopt-server db upgrade --db {url}` first"
        )
