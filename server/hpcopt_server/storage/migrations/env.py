"""Alembic environment: runs migrations on the URL given by ``storage.migrate``."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine, event, pool

from hpcopt_server.storage.db import use_wal
from hpcopt_server.storage.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url is not set"
engine = create_engine(url, poolclass=pool.NullPool)
if engine.dialect.name == "sqlite":
    # The whole upgrade is one transaction that holds the write lock from its start
    # (BEGIN IMMEDIATE; others wait up to 30 s): processes opening one fresh file at once
    # (the embedded mode's Study) create the schema once, and the others then find it at
    # head. pysqlite's own transactions would run each CREATE and ALTER by itself: four
    # processes then failed with "table agents already exists" and "duplicate column".
    # Foreign keys stay off here, as SQLite's batch migrations need.

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA busy_timeout=30000")
        if engine.url.database not in (None, "", ":memory:"):
            use_wal(dbapi_conn)  # before the lock: the file's mode changes outside a transaction

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        # SQLite's DDL is transactional; alembic assumes not, and would commit after each
        # revision (a reader then saw "the schema is at 0004" mid-upgrade).
        transactional_ddl=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Replicas starting together on an empty database: one migrates, the others
            # wait here and then find the schema at head.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7061636)")
        context.run_migrations()
engine.dispose()
