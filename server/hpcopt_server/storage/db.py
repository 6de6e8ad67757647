"""Engines and transactions for SQLite and PostgreSQL.

SQLite: WAL, ``synchronous=FULL`` (a commit is on disk before it is acknowledged),
foreign keys on, a 30 s busy timeout across processes, and write transactions opened
with ``BEGIN IMMEDIATE`` so that two writers never deadlock upgrading a read lock.
Inside one process writers also take a lock, so threads queue on it instead of
sleep-polling SQLite's busy handler. That lock is first come, first served
(:class:`FairLock`): a thread that writes in a loop (a chunked import) cannot take it
back ahead of an agent's heartbeat that has been waiting.

PostgreSQL: a connection pool sized for the gRPC thread pool; transactions run at
READ COMMITTED and take row locks explicitly (``FOR UPDATE [SKIP LOCKED]``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from hpcopt_server.errors import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long a new PostgreSQL connection is retried while the server refuses connections
#: (``max_connections`` reached, starting up, restarting) before the call fails.
CONNECT_PATIENCE = 10.0
# too_many_connections, cannot_connect_now (starting up or shutting down), and the
# connection failures psycopg reports without a server answer.
_TRANSIENT_SQLSTATES = {"53300", "57P03", "08001", "08004", "08006"}
# (libpq's connection failures carry no SQLSTATE: psycopg gives only the text.)
_TRANSIENT_TEXT = (
    "connection refused",
    "could not connect",
    "no such file or directory",
    "server closed the",
    "too many connections",
    "remaining connection slots are reserved",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
)
# A database that cannot write now but may once space is freed: SQLite's SQLITE_FULL and
# SQLITE_IOERR (a full disk surfaces as either, WAL or not), PostgreSQL's disk_full and
# io_error. A call gets UNAVAILABLE / 503 with Retry-After, which agents ride out, not a
# 500 with a traceback that a real agent took as fatal (its trial left RUNNING).
_STORAGE_SQLSTATES = {"53100", "58030"}
_STORAGE_TEXT = ("database or disk is full", "disk i/o error", "no space left on device")
_last_warning = [0.0]


def use_wal(dbapi_conn: Any, patience: float = 30.0) -> None:
    """Puts a SQLite file in WAL mode (it stays so) unless it is already. Switching takes
    the file's exclusive lock and SQLite answers "database is locked" at once, without its
    busy handler, while another process holds a lock (one creating the schema): so it is
    retried for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        try:
            cur = dbapi_conn.cursor()
            try:
                if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    cur.execute("PRAGMA journal_mode=WAL")
            finally:
                cur.close()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def transient(exc: BaseException) -> bool:
    """Whether a connection error is one that waiting may cure (not a bad password)."""
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state in _TRANSIENT_SQLSTATES
    text = str(orig).lower()
    return type(orig).__name__ == "OperationalError" and any(t in text for t in _TRANSIENT_TEXT)


def out_of_space(exc: BaseException) -> bool:
    """Whether a statement failed because the database cannot write for now (a full
    disk, an I/O error), which freeing space may cure."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) in _STORAGE_SQLSTATES:
        return True
    text = str(orig).lower()
    return any(t in text for t in _STORAGE_TEXT)


def _unavailable(exc: OperationalError) -> Unavailable | None:
    """The Unavailable a database error means, or None if it is not one waiting may cure."""
    if transient(exc) or exc.connection_invalidated:
        return Unavailable(f"the database is unavailable ({_reason(exc)}); try again")
    if out_of_space(exc):
        _warn_out_of_space(exc)
        return Unavailable(f"the database cannot write now ({_reason(exc)}); try again")
    return None


def _warn_out_of_space(exc: BaseException) -> None:
    now = time.monotonic()
    if now - _last_space_warning[0] >= 60.0:  # one line a minute, not a traceback a call
        _last_space_warning[0] = now
        log.error("the database cannot write: %s; calls get UNAVAILABLE / 503 until space is freed", _reason(exc))


_last_space_warning = [-1e18]


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def with_retries(fn: Callable[[], T], *, patience: float, what: str) -> T:
    """``fn()``, called again with back-off (0.25 s doubling to 5 s) while it fails with
    a transient connection error, for up to ``patience`` seconds; each wait is logged
    (at most one line every 5 s)."""
    deadline, delay = time.monotonic() + patience, 0.25
    while True:
        try:
            return fn()
        except Exception as exc:
            left = deadline - time.monotonic()
            if not transient(exc) or left < delay:
                raise
            now = time.monotonic()
            if now - _last_warning[0] >= 5.0:
                _last_warning[0] = now
                log.warning("%s: %s; retrying for up to %.0f s more", what, _reason(exc), left)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class FairLock:
    """A lock handed to its waiters in the order they asked for it.

    ``threading.Lock`` is not fair: the thread that releases it usually takes it again
    before a waiter wakes, so a writer in a loop (an import in chunks) starved an
    agent's heartbeat for the whole import on a loaded machine. Here a release hands the
    lock straight to the oldest waiter, so a thread that asks again queues behind it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[threading.Lock] = deque()

    def __enter__(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        try:
            turn.acquire()  # released by the holder that hands us the lock
        except BaseException:  # interrupted while waiting: give up the place, or the lock
            with self._mutex:
                if turn in self._waiters:
                    self._waiters.remove(turn)
                    raise
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()  # still held: it is theirs now
            else:
                self._held = False


class Database:
    """One engine and its session factory. ``url`` is any SQLAlchemy URL."""

    def __init__(self, url: str, *, pool_size: int = 16, echo: bool = False):
        self.url = make_url(url)
        self.dialect = self.url.get_backend_name()
        self._write_lock = FairLock() if self.dialect == "sqlite" else None
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
        try:
            with self._autocommit.connect() as conn:
                yield conn
        except OperationalError as exc:
            if (refusal := _unavailable(exc)) is not None:
                raise refusal from exc
            raise

    def _run(self, write: bool) -> Iterator[Session]:
        session = (self._writers if write else self._readers)()
        try:
            yield session
            session.commit()
        except OperationalError as exc:
            session.rollback()
            if (refusal := _unavailable(exc)) is not None:
                raise refusal from exc
            raise
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
        # connection broken by a database restart fails one call (UNAVAILABLE) and is
        # replaced. New connections are retried while PostgreSQL refuses them.
        # Up to 2 * pool_size connections, each kept open once opened: a pool that closed
        # its burst connections on return reopened them at the next burst, and under a
        # few hundred agents those PostgreSQL backend starts cost it more CPU than the
        # agents' calls (0.76 against 0.44 ms per call at 256 agents).
        pg = create_engine(url, pool_size=2 * pool_size, max_overflow=0, pool_recycle=1800, echo=echo)

        @event.listens_for(pg, "do_connect")
        def _connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
            where = f"PostgreSQL at {parsed.host or 'localhost'}:{parsed.port or 5432}"
            return with_retries(
                lambda: dialect.connect(*cargs, **cparams),
                patience=CONNECT_PATIENCE,
                what=f"{where} refused a connection",
            )

        return pg
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
        if not memory:
            use_wal(dbapi_conn)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get("hpcopt_write", True)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine
