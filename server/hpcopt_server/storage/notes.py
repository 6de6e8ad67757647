"""Notes on campaigns and trials, saved with optimistic concurrency: a save names the
version it was edited from and succeeds only if that is still the stored one, so of two
people editing the same note the second is told, not silently overwritten. A repository
of :class:`~hpcopt_server.storage.repository.Tx` (``tx.notes``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, func, insert, select, update

from hpcopt_server import domain as d
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store

#: ``notes.trial_number`` of a campaign's own note.
CAMPAIGN = -1
#: What a note keeps of its history: its newest versions, at most this many and at most
#: this many characters of text together (the newest is always kept); older ones are
#: deleted at the save that passes either. 6,553 saves of 20,000 characters grew a
#: database by 164 MB before.
MAX_VERSIONS, MAX_VERSION_CHARS = 100, 1_000_000
NOTES = cast(Table, m.NoteRow.__table__)
VERSIONS = cast(Table, m.NoteVersionRow.__table__)


def _note(row: m.NoteRow) -> d.Note:
    number = None if row.trial_number == CAMPAIGN else row.trial_number
    return d.Note(row.campaign_id, number, row.body, row.version, row.updated_at, row.updated_by)


class NoteStore(Store):
    def get(self, campaign_id: int, trial_number: int | None) -> d.Note:
        """The note (version 0 and empty when none was ever saved)."""
        key = CAMPAIGN if trial_number is None else trial_number
        row = self.s.get(m.NoteRow, (campaign_id, key))
        return _note(row) if row is not None else d.Note(campaign_id, trial_number)

    def of_campaign(self, campaign_id: int) -> dict[int | None, str]:
        """Every non-empty note of the campaign by trial number (None: the campaign's)."""
        rows = self.s.execute(
            select(m.NoteRow.trial_number, m.NoteRow.body).where(
                m.NoteRow.campaign_id == campaign_id, m.NoteRow.body != ""
            )
        )
        return {(None if n == CAMPAIGN else n): body for n, body in rows}

    def noted_trials(self, campaign_id: int) -> list[int]:
        """Numbers of the campaign's trials with a non-empty note, in order."""
        rows = self.s.scalars(
            select(m.NoteRow.trial_number)
            .where(m.NoteRow.campaign_id == campaign_id, m.NoteRow.trial_number != CAMPAIGN, m.NoteRow.body != "")
            .order_by(m.NoteRow.trial_number)
        )
        return list(rows)

    def save(
        self, campaign_id: int, trial_number: int | None, body: str, base_version: int, now: datetime, by: str
    ) -> d.Note | None:
        """Stores ``body`` as version ``base_version + 1`` if the stored version is still
        ``base_version``; None (nothing changed) if another save came first."""
        key = CAMPAIGN if trial_number is None else trial_number
        values = {"body": body, "version": base_version + 1, "updated_at": now, "updated_by": by}
        dialect = self.s.get_bind().dialect
        if base_version == 0:  # the first save: an insert that a concurrent first save makes a no-op
            stmt: Any = self._upsert()(NOTES).values(campaign_id=campaign_id, trial_number=key, **values)
            stmt = stmt.on_conflict_do_nothing(index_elements=["campaign_id", "trial_number"])
        else:
            where = (NOTES.c.campaign_id == campaign_id, NOTES.c.trial_number == key, NOTES.c.version == base_version)
            stmt = update(NOTES).where(*where).values(**values)
        # psycopg reports rowcount -1 for these: ask for the row back where the database can.
        if dialect.insert_returning and dialect.update_returning:
            saved = self.s.execute(stmt.returning(NOTES.c.version)).first() is not None
        else:
            saved = self.s.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
        if not saved:
            return None
        # A save over someone else's text keeps theirs, as the version before.
        self.s.execute(
            insert(VERSIONS).values(
                campaign_id=campaign_id,
                trial_number=key,
                version=base_version + 1,
                body=body,
                saved_at=now,
                saved_by=by,
            )
        )
        self._prune(campaign_id, key)
        return d.Note(campaign_id, trial_number, body, base_version + 1, now, by)

    def _prune(self, campaign_id: int, key: int) -> None:
        """Deletes the versions past :data:`MAX_VERSIONS` or :data:`MAX_VERSION_CHARS`,
        oldest first; the newest always stays."""
        mine = (VERSIONS.c.campaign_id == campaign_id, VERSIONS.c.trial_number == key)
        rows = self.s.execute(
            select(VERSIONS.c.version, func.length(VERSIONS.c.body))
            .where(*mine)
            .order_by(VERSIONS.c.version.desc())
            .limit(MAX_VERSIONS + 1)
        ).all()
        chars = 0
        for kept, (version, n) in enumerate(rows):
            chars += int(n or 0)
            if kept and (kept >= MAX_VERSIONS or chars > MAX_VERSION_CHARS):
                self.s.execute(delete(VERSIONS).where(*mine, VERSIONS.c.version <= version))
                return

    def versions(
        self, campaign_id: int, trial_number: int | None, offset: int = 0, limit: int = MAX_VERSIONS
    ) -> tuple[list[d.NoteVersion], int]:
        """A page of the note's kept versions, newest first (without their text), and
        how many are kept."""
        key = CAMPAIGN if trial_number is None else trial_number
        mine = (VERSIONS.c.campaign_id == campaign_id, VERSIONS.c.trial_number == key)
        rows = self.s.execute(
            select(VERSIONS.c.version, VERSIONS.c.saved_at, VERSIONS.c.saved_by, func.length(VERSIONS.c.body))
            .where(*mine)
            .order_by(VERSIONS.c.version.desc())
            .offset(offset)
            .limit(limit)
        )
        total = int(self.s.scalar(select(func.count()).select_from(VERSIONS).where(*mine)) or 0)
        return [d.NoteVersion(v, at, by or "", int(n or 0)) for v, at, by, n in rows], total

    def version(self, campaign_id: int, trial_number: int | None, version: int) -> d.Note | None:
        """Version ``version`` of the note with its text; None if it was never saved."""
        key = CAMPAIGN if trial_number is None else trial_number
        row = self.s.get(m.NoteVersionRow, (campaign_id, key, version))
        if row is None:
            return None
        return d.Note(campaign_id, trial_number, row.body, row.version, row.saved_at, row.saved_by)
