"""Engines and transactions for SQLite and PostgreSQL.

SQLite: WAL, ``synchronous=FULL`` (a commit is on disk before it is acknowledged),
foreign keys on, a 30 s busy timeout across processes, and write transactions opened
with ``BEGIN IMMEDIATE`` so that two writers never deadlock upgrading a read lock.
Inside one process writers also take a lock, so threads queue on it instead of
sleep-polling SQLite's busy handler.

PostgreSQL: a connection pool sized for the gRPC thread pool; transactions run at
READ COMMITTED and take row locks explicitly (``FOR UPDATE [SKIP LOCKED]``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


class Database:
    """One engine and its session factory. ``url`` is any SQLAlchemy URL."""

    def __init__(self, url: str, *, pool_size: int = 16, echo: bool = False):
        self.url = make_url(url)
        self.dialect = self.url.get_backend_name()
        self._write_lock = threading.Lock() if self.dialect == "sqlite" else None
        self.engine: Engine = _create_engine(url, pool_size=pool_size, echo=echo)
        self._writers = sessionmaker(self.engine, expire_on_commit=False, autoflush=False)
        readers = self.engine.execution_options(hpcopt_write=False)
        self._readers = sessionmaker(readers, expire_on_commit=False, autoflush=False)
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        if self._write_lock is not None and write:
            with self._write_lock:
                yield from self._run(write)
        else:
            yield from self._run(write)

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A pooled connection on which each statement commits by itself: for work that
        is one statement, it saves BEGIN and COMMIT (two round trips)."""
        with self._autocommit.connect() as conn:
            yield conn

    def _run(self, write: bool) -> Iterator[Session]:
        session = (self._writers if write else self._readers)()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()


def _create_engine(url: str, *, pool_size: int, echo: bool) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # No pre-ping: it costs a round trip per transaction; recycle instead, and a
        # connection broken by a database restart fails one call (INTERNAL) and is replaced.
        return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_recycle=1800, echo=echo)
    engine = create_engine(
        url,
        echo=echo,
        connect_args={"timeout": 30, "check_same_thread": False},
        pool_size=pool_size,
        max_overflow=pool_size,
    )
    memory = parsed.database in (None, "", ":memory:")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below issue BEGIN itself.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get("hpcopt_write", True)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine
