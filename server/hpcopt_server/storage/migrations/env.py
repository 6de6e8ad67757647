"""Alembic environment: runs migrations on the URL given by ``storage.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from hpcopt_server.storage.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url is not set"
engine = create_engine(url, poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Replicas starting together on an empty database: one migrates, the others
            # wait here and then find the schema at head.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7061636)")
        context.run_migrations()
engine.dispose()
