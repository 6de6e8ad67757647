"""A fold's curvature and landscape, as the agent computed it at the fold's end (the
spec's ``analysis``). A repository of :class:`~hpcopt_server.storage.repository.Tx`
(``tx.analyses``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, select

from hpcopt_server import domain as d
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store

ANALYSES = cast(Table, m.FoldAnalysisRow.__table__)


def _analysis(row: m.FoldAnalysisRow) -> d.FoldAnalysis:
    return d.FoldAnalysis(row.trial_id, row.fold, row.attempt, dict(row.document), row.computed_at)


class AnalysisStore(Store):
    def save(self, trial_id: int, fold: int, attempt: int, document: dict[str, Any], at: datetime) -> None:
        """Stores the fold's analysis; one computed again (a later attempt) replaces it."""
        values = {"attempt": attempt, "document": document, "computed_at": at}
        stmt: Any = self._upsert()(ANALYSES).values(trial_id=trial_id, fold=fold, **values)
        self.s.execute(stmt.on_conflict_do_update(index_elements=["trial_id", "fold"], set_=values))

    def of_trial(self, trial_id: int) -> list[d.FoldAnalysis]:
        """The trial's analyses, by fold ([] when none)."""
        q = select(m.FoldAnalysisRow).where(m.FoldAnalysisRow.trial_id == trial_id).order_by(m.FoldAnalysisRow.fold)
        return [_analysis(r) for r in self.s.scalars(q)]

    def of_campaign(self, campaign_id: int) -> dict[int, list[d.FoldAnalysis]]:
        """Every analysis of the campaign's trials, by trial id, each by fold."""
        q = (
            select(m.FoldAnalysisRow)
            .join(m.TrialRow, m.TrialRow.id == m.FoldAnalysisRow.trial_id)
            .where(m.TrialRow.campaign_id == campaign_id)
            .order_by(m.FoldAnalysisRow.trial_id, m.FoldAnalysisRow.fold)
        )
        out: dict[int, list[d.FoldAnalysis]] = {}
        for r in self.s.scalars(q):
            out.setdefault(r.trial_id, []).append(_analysis(r))
        return out
