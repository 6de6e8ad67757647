"""A fold's curvature and landscape, as the agent computed it at the fold's end (the
spec's ``analysis``) or later on request (an ``analysis_requests`` row, leased to an
agent like a trial). A repository of :class:`~hpcopt_server.storage.repository.Tx`
(``tx.analyses``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, select, update

from hpcopt_server import domain as d
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store

ANALYSES = cast(Table, m.FoldAnalysisRow.__table__)
REQUESTS = cast(Table, m.AnalysisRequestRow.__table__)
#: The states of an analysis asked for after the fact.
QUEUED, RUNNING, DONE, FAILED = "QUEUED", "RUNNING", "DONE", "FAILED"


def _analysis(row: m.FoldAnalysisRow) -> d.FoldAnalysis:
    return d.FoldAnalysis(row.trial_id, row.fold, row.attempt, dict(row.document), row.computed_at)


def _request(row: m.AnalysisRequestRow) -> d.AnalysisRequest:
    return d.AnalysisRequest(
        row.trial_id,
        row.campaign_id,
        row.state,
        row.requested_at,
        row.agent_id,
        row.lease_id,
        row.lease_expires_at,
        row.finished_at,
        row.reason,
    )


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

    # -- analyses asked for after the fact --------------------------------------------

    def request(self, trial_id: int, campaign_id: int, now: datetime) -> d.AnalysisRequest:
        """Queues an analysis of the trial, replacing an earlier request of it (whatever
        its state: a RUNNING one's agent is refused when it reports)."""
        values = {
            "campaign_id": campaign_id,
            "state": QUEUED,
            "requested_at": now,
            "agent_id": "",
            "lease_id": "",
            "lease_expires_at": None,
            "finished_at": None,
            "reason": "",
        }
        stmt: Any = self._upsert()(REQUESTS).values(trial_id=trial_id, **values)
        self.s.execute(stmt.on_conflict_do_update(index_elements=["trial_id"], set_=values))
        self._forget(m.AnalysisRequestRow, trial_id)
        return d.AnalysisRequest(trial_id, campaign_id, QUEUED, now)

    def request_of(self, trial_id: int) -> d.AnalysisRequest | None:
        """The trial's analysis request, if one was made."""
        q = select(m.AnalysisRequestRow).where(m.AnalysisRequestRow.trial_id == trial_id)
        row = self.s.scalars(q.execution_options(populate_existing=True)).one_or_none()
        return None if row is None else _request(row)

    def take(self, campaign_id: int, agent_id: str, lease_id: str, now: datetime, expires: datetime) -> int | None:
        """The oldest QUEUED request of the campaign (or a RUNNING one whose lease has
        expired), now RUNNING under ``lease_id`` until ``expires``: its trial's id; None
        when there is none."""
        R = m.AnalysisRequestRow
        waiting = (R.state == QUEUED) | ((R.state == RUNNING) & (R.lease_expires_at < now))
        q = select(R.trial_id).where(R.campaign_id == campaign_id, waiting).order_by(R.requested_at, R.trial_id)
        for trial_id in self.s.scalars(q.limit(4)):
            taken = (
                update(R)
                .where(R.trial_id == trial_id, waiting)
                .values(state=RUNNING, agent_id=agent_id, lease_id=lease_id, lease_expires_at=expires)
            )
            if self.s.execute(taken.execution_options(synchronize_session=False)).rowcount:  # type: ignore[attr-defined]
                self._forget(R, trial_id)
                return int(trial_id)
        return None

    def holds(self, trial_id: int, agent_id: str, lease_id: str, now: datetime) -> bool:
        """Whether ``agent_id`` holds the trial's RUNNING request under ``lease_id``, unexpired."""
        r = self.request_of(trial_id)
        return (
            r is not None
            and r.state == RUNNING
            and (r.agent_id, r.lease_id) == (agent_id, lease_id)
            and r.lease_expires_at is not None
            and r.lease_expires_at > now
        )

    def end(self, trial_id: int, agent_id: str, lease_id: str, now: datetime, reason: str = "") -> bool:
        """The held request DONE (FAILED when ``reason`` says why); False if this lease
        does not hold it (it expired and was taken again, or was asked for again)."""
        R = m.AnalysisRequestRow
        q = (
            update(R)
            .where(R.trial_id == trial_id, R.state == RUNNING, R.agent_id == agent_id, R.lease_id == lease_id)
            .values(state=FAILED if reason else DONE, finished_at=now, reason=reason, lease_expires_at=None)
        )
        ended = bool(self.s.execute(q.execution_options(synchronize_session=False)).rowcount)  # type: ignore[attr-defined]
        self._forget(R, trial_id)
        return ended
