"""Fresh databases on the real PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Generator


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


def fresh_pg_database(admin: str, template: str | None = None) -> Generator[str, None, None]:
    """A new database (dropped when the generator closes): empty, or a copy of the
    database ``template`` names (``CREATE DATABASE ... TEMPLATE``: a file copy, which
    needs no other session on the template)."""
    import psycopg

    name = f"hpcopt_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq(admin), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(libpq(admin), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
