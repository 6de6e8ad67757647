"""API tokens (only their hashes are stored) and the server's flags (whether auth is on,
the server's id). Repositories of :class:`~hpcopt_server.storage.repository.Tx`
(``tx.tokens``, ``tx.flags``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select, update

from hpcopt_server import domain as d
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store, must


class TokenStore(Store):
    def insert(self, name: str, token_hash: str, scopes: Iterable[str], now: datetime) -> d.ApiToken:
        """Stores a token; if another transaction stored the same secret meanwhile (two
        replicas starting with one HPCOPT_ADMIN_TOKEN), returns that one."""
        stmt = self._upsert()(m.ApiTokenRow).values(
            name=name, token_hash=token_hash, scopes=",".join(sorted(scopes)), created_at=now
        )
        self.s.execute(stmt.on_conflict_do_nothing(index_elements=["token_hash"]))
        token = self.by_hash(token_hash)
        assert token is not None
        return token

    def by_hash(self, token_hash: str) -> d.ApiToken | None:
        """The token whose secret hashes to ``token_hash`` (revoked or not), None if none."""
        row = self.s.scalars(select(m.ApiTokenRow).where(m.ApiTokenRow.token_hash == token_hash)).one_or_none()
        return mapping.token(row) if row else None

    def stored(self) -> list[d.ApiToken]:
        """Every token, revoked ones too, oldest first."""
        return [mapping.token(r) for r in self.s.scalars(select(m.ApiTokenRow).order_by(m.ApiTokenRow.id))]

    def count_active(self) -> int:
        """How many tokens are not revoked."""
        q = select(func.count()).select_from(m.ApiTokenRow).where(m.ApiTokenRow.revoked_at.is_(None))
        return self.s.scalar(q) or 0

    def revoke(self, token_id: int, now: datetime) -> None:
        """The token is revoked at ``now``; KeyError if there is no such token."""
        q = update(m.ApiTokenRow).where(m.ApiTokenRow.id == token_id).values(revoked_at=now)
        must(self.s.execute(q).rowcount, f"token {token_id}")  # type: ignore[attr-defined]


class FlagStore(Store):
    def get(self, name: str) -> str | None:
        """The flag's value, None if it was never set."""
        row = self.s.get(m.ServerFlagRow, name)
        return row.value if row else None

    def set(self, name: str, value: str, now: datetime) -> None:
        """Sets a flag atomically (an upsert: two servers starting at once both succeed)."""
        stmt = self._upsert()(m.ServerFlagRow).values(name=name, value=value, changed_at=now)
        self.s.execute(
            stmt.on_conflict_do_update(
                index_elements=["name"],
                set_={"value": value, "changed_at": now},
                where=m.ServerFlagRow.value != stmt.excluded.value,
            )
        )

    def ensure(self, name: str, value: str, now: datetime) -> str:
        """The flag's value, storing ``value`` first when it has none (two servers
        starting at once store one of theirs, and both read that one)."""
        stmt = self._upsert()(m.ServerFlagRow).values(name=name, value=value, changed_at=now)
        self.s.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))
        stored = self.s.scalar(select(m.ServerFlagRow.value).where(m.ServerFlagRow.name == name))
        assert stored is not None
        return stored
