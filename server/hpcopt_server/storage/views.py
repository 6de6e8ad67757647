"""Read-only queries behind the dashboard's views: the trials table sorted or filtered
by what SQL cannot index portably (a parameter in the JSON ``params``, the time a trial
ran, its agent), attempt spans from the event log (timeline, time ran), the running
trials with their latest report, and whether a campaign's plots changed. A repository of
:class:`~hpcopt_server.storage.repository.Tx` (``tx.views``); it never writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select

from hpcopt_server import domain as d
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store


@dataclass(frozen=True)
class Listed:
    """The columns of one trial that the table sorts and filters by in Python."""

    id: int
    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    agent_id: str
    value_std: float | None
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    #: Every objective's value (multi-objective; read only when asked for).
    values: list[float] | None = None


@dataclass(frozen=True)
class Span:
    """One attempt of a trial on an agent: from its acquisition to how it ended
    (``end`` None and ``outcome`` "running" while it runs)."""

    trial_id: int
    number: int
    attempt: int
    agent_id: str
    start: datetime
    end: datetime | None
    outcome: str


@dataclass(frozen=True)
class Running:
    """A RUNNING trial with its folds finished and its latest learning-curve point."""

    trial: d.Trial
    folds_finished: int
    latest: d.CurvePoint | None
    #: Learning-curve points per fold (the epochs each fold has reported).
    steps: dict[int, int]


class ViewStore(Store):
    def listed_trials(
        self,
        campaign_id: int,
        states: Iterable[d.TrialState] = (),
        names: Iterable[str] = (),
        *,
        with_values: bool = False,
        numeric: Iterable[str] = (),
    ) -> list[Listed]:
        """The table's columns of every matching trial by number, with only the parameters ``names``
        (extracted by the database: decoding every trial's whole JSON in Python would
        cost more than everything else here), and every objective's value if asked.
        Parameters in ``numeric`` come as floats, at full precision: SQLite quotes a
        JSON number with 15 significant digits, so a range filter on this path missed
        trials that the SQL path (which compares the double) found."""
        t = m.TrialRow
        wanted_params = list(dict.fromkeys(names))
        as_float = set(numeric)
        extra = [t.params[n].as_float() if n in as_float else t.params[n] for n in wanted_params]
        q = select(
            t.id,
            t.number,
            t.state,
            t.value,
            t.agent_id,
            t.value_std,
            t.attempt,
            t.started_at,
            t.finished_at,
            t.values if with_values else literal(None),
            *extra,
        ).where(t.campaign_id == campaign_id)
        wanted = [str(s) for s in states]
        if wanted:
            q = q.where(t.state.in_(wanted))
        out = []
        for r in self.s.execute(q.order_by(t.number)):
            params = {n: v for n, v in zip(wanted_params, r[10:], strict=True) if v is not None}
            out.append(Listed(r[0], r[1], r[2], r[3], params, *r[4:9], values=r[9]))
        return out

    def trial_id_by_number(self, campaign_id: int, number: int) -> int | None:
        """The id of the campaign's trial with this number, None if there is none."""
        return self.s.scalar(
            select(m.TrialRow.id).where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.number == number)
        )

    def spans(self, campaign_id: int, trial_ids: list[int] | None = None) -> list[Span]:
        """Attempt spans of the campaign's trials (or of these), oldest first."""
        q = (
            select(
                m.TrialEventRow.trial_id,
                m.TrialRow.number,
                m.TrialEventRow.attempt,
                m.TrialEventRow.kind,
                m.TrialEventRow.agent_id,
                m.TrialEventRow.at,
            )
            .join(m.TrialRow, m.TrialRow.id == m.TrialEventRow.trial_id)
            .where(m.TrialRow.campaign_id == campaign_id)
            .order_by(m.TrialEventRow.id)
        )
        if trial_ids is not None:
            if not trial_ids:
                return []
            q = q.where(m.TrialEventRow.trial_id.in_(trial_ids))
        open_: dict[int, tuple[int, int, str, datetime]] = {}
        out: list[Span] = []
        for tid, number, attempt, kind, agent, at in self.s.execute(q):
            if kind == "acquired":
                open_[tid] = (number, attempt, agent, at)
            elif kind in d.ENDS_ATTEMPT and tid in open_:
                n, a, who, start = open_.pop(tid)
                out.append(Span(tid, n, a, who, start, at, kind))
        out.extend(Span(tid, n, a, who, start, None, "running") for tid, (n, a, who, start) in open_.items())
        out.sort(key=lambda s: s.start)
        return out

    def running_detail(self, campaign_id: int) -> list[Running]:
        """The campaign's RUNNING trials by number, each with its folds finished and its
        latest learning-curve point."""
        rows = list(
            self.s.scalars(
                select(m.TrialRow)
                .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.RUNNING)
                .order_by(m.TrialRow.number)
            )
        )
        ids = [r.id for r in rows]
        finished: dict[int, int] = {}
        latest: dict[int, d.CurvePoint] = {}
        steps: dict[int, dict[int, int]] = {}
        if ids:
            fq = (
                select(m.FoldRow.trial_id, func.count())
                .where(m.FoldRow.trial_id.in_(ids), m.FoldRow.finished.is_(True))
                .group_by(m.FoldRow.trial_id)
            )
            finished = {int(t): int(n) for t, n in self.s.execute(fq)}
            cq = select(m.CurveRow).where(m.CurveRow.trial_id.in_(ids)).order_by(m.CurveRow.fold, m.CurveRow.step)
            for c in self.s.scalars(cq):
                per = steps.setdefault(c.trial_id, {})
                per[c.fold] = per.get(c.fold, 0) + 1
                latest[c.trial_id] = d.CurvePoint(c.fold, c.step, c.value)
        return [Running(mapping.trial(r), finished.get(r.id, 0), latest.get(r.id), steps.get(r.id, {})) for r in rows]

    def plot_revision(self, campaign_id: int) -> tuple[int, datetime, int] | None:
        """(trials that reached a final state, creation time, trials created) of the
        campaign, None if there is none: one row read that says whether its trials
        changed (the creation time tells apart two databases whose campaign N has the
        same counts)."""
        q = select(m.CampaignRow.finished_count, m.CampaignRow.created_at, m.CampaignRow.next_number)
        row = self.s.execute(q.where(m.CampaignRow.id == campaign_id)).first()
        return (int(row[0]), row[1], int(row[2])) if row else None
