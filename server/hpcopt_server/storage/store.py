"""What every repository of a unit of work (:class:`~hpcopt_server.storage.repository.Tx`)
shares: its session, the ``KeyError`` that a change of a missing row raises, and the
dialect's ``INSERT … ON CONFLICT``."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session


class Store:
    """One aggregate's queries inside one transaction."""

    def __init__(self, session: Session):
        self.s = session

    def _forget(self, model: type[Any], key: int) -> None:
        """Drops what the session remembers of a row that a statement changed behind it."""
        row = self.s.identity_map.get(self.s.identity_key(model, key))
        if row is not None:
            self.s.expire(row)

    def _upsert(self) -> Any:
        """The dialect's ``insert`` that knows ``on_conflict_do_*``."""
        return pg_insert if self.s.get_bind().dialect.name == "postgresql" else sqlite_insert


def must(rowcount: int, what: str) -> None:
    """``KeyError(what)`` when a change matched no row."""
    if rowcount == 0:
        raise KeyError(what)
