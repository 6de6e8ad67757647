"""Notes on campaigns and trials: read with the ``read`` scope, saved with ``submit``
(the transports check the scope). A save names the version it was edited from
(``base_version``, 0 for a note never saved); if someone saved in between, it is
refused with FailedPrecondition (HTTP 409) carrying the stored note, and nothing is
lost: the editor still holds their text and can merge and save again. Saved versions
are kept (``versions``, ``version``): a save over someone else's text, or an empty save
that clears a note, leaves the earlier text readable and restorable. A note keeps its
newest 100 versions within 1,000,000 characters of text; a save that passes either
deletes the oldest (``storage/notes.py``)."""

from __future__ import annotations

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound
from hpcopt_server.service import limits as lim
from hpcopt_server.service.context import Context, campaign_or_404
from hpcopt_server.service.owners import require_owner
from hpcopt_server.storage.notes import MAX_VERSION_CHARS, MAX_VERSIONS
from hpcopt_server.storage.repository import Tx


class NoteService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def get(self, campaign_id: int, trial_number: int | None = None) -> d.Note:
        """The note of the campaign, or of its trial ``trial_number`` (empty, version 0,
        when none was saved); NotFound for a campaign or trial that does not exist."""
        with self.ctx.storage.read() as tx:
            self._target(tx, campaign_id, trial_number)
            return tx.notes.get(campaign_id, trial_number)

    def versions(
        self, campaign_id: int, trial_number: int | None = None, offset: int = 0, limit: int = MAX_VERSIONS
    ) -> tuple[list[d.NoteVersion], int]:
        """A page of the note's kept versions, newest first, and how many are kept (the
        newest :data:`MAX_VERSIONS`, within :data:`MAX_VERSION_CHARS` characters)."""
        lim.require_page(offset, limit, MAX_VERSIONS)
        with self.ctx.storage.read() as tx:
            self._target(tx, campaign_id, trial_number)
            return tx.notes.versions(campaign_id, trial_number, offset, limit)

    def version(self, campaign_id: int, trial_number: int | None, version: int) -> d.Note:
        """Version ``version`` of the note, with its text; NotFound if it was never saved."""
        if not 1 <= version <= lim.MAX_ID:
            raise InvalidArgument(
                f"version must be in 1..{lim.MAX_ID}, got {version}", [("version", "a saved version, from 1")]
            )
        with self.ctx.storage.read() as tx:
            self._target(tx, campaign_id, trial_number)
            note = tx.notes.version(campaign_id, trial_number, version)
        if note is None:
            what = "the campaign's note" if trial_number is None else f"the note of trial #{trial_number}"
            raise NotFound(
                f"{what} has no version {version}: never saved, or older than what a note keeps (its "
                f"{MAX_VERSIONS} newest versions, within {MAX_VERSION_CHARS:,} characters)"
            )
        return note

    def noted_trials(self, campaign_id: int) -> list[int]:
        """Numbers of the trials that have a note."""
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            return tx.notes.noted_trials(campaign_id)

    def save(
        self,
        campaign_id: int,
        trial_number: int | None,
        body: str,
        base_version: int,
        token: d.ApiToken | None = None,
    ) -> d.Note:
        """Saves ``body`` over version ``base_version``; the saved note (its version one
        more). An empty body clears the note (it keeps its version count)."""
        body = lim.require_multiline_text("body", body, lim.MAX_NOTE)
        if not 0 <= base_version <= lim.MAX_ID:
            raise InvalidArgument(
                f"base_version must be in 0..{lim.MAX_ID}, got {base_version}",
                [("base_version", f"must be in 0..{lim.MAX_ID}: the version you edited (0 for a new note)")],
            )
        with self.ctx.storage.write() as tx:
            require_owner(self._target(tx, campaign_id, trial_number), token, "write the notes of")
            saved = tx.notes.save(
                campaign_id, trial_number, body, base_version, self.ctx.clock(), token.name if token else ""
            )
            if saved is None:
                stored = tx.notes.get(campaign_id, trial_number)
                raise FailedPrecondition(
                    f"the note is at version {stored.version} (saved by {stored.updated_by or 'someone'}), not the "
                    f"version {base_version} you edited; reload it, merge your text and save again"
                )
            return saved

    @staticmethod
    def _target(tx: Tx, campaign_id: int, trial_number: int | None) -> d.Campaign:
        campaign = campaign_or_404(tx, campaign_id)
        if trial_number is not None and (
            not 0 <= trial_number <= lim.MAX_ID or tx.views.trial_id_by_number(campaign_id, trial_number) is None
        ):
            raise NotFound(f"campaign {campaign_id} has no trial #{trial_number}")
        return campaign
