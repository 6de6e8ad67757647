"""Read-only queries over a campaign's results: what the optimizers, pruners, planner
and insights read (finished trials in finish order, fold values, curve points, the best
trials). A repository of :class:`~hpcopt_server.storage.repository.Tx` (``tx.results``);
it never writes."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select
from sqlalchemy.orm import Session

from hpcopt_server import domain as d
from hpcopt_server.curves import READ_POINTS_PER_FOLD, thin
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store

_TRIALS = cast(Table, m.TrialRow.__table__)
_FINISHED_AFTER = (
    select(_TRIALS)
    .where(_TRIALS.c.campaign_id == bindparam("cid"), _TRIALS.c.finish_seq > bindparam("seq"))
    .order_by(_TRIALS.c.finish_seq)
)
_COMPLETED = d.TrialState.COMPLETED
#: Feasible trials first (violation 0, or a campaign without constraints), then the
#: infeasible ones by how much they break their constraints: the order every view of
#: results starts with (``hpcopt.core.constraints``).
FEASIBLE_FIRST = func.coalesce(m.TrialRow.violation, 0.0)
_FEASIBLE = func.coalesce(m.TrialRow.violation, 0.0) <= 0.0


def curves_of(s: Session, trial_ids: list[int], per_fold: int | None) -> dict[int, list[d.CurvePoint]]:
    """:meth:`ResultStore.curves_of` in session ``s``."""
    out: dict[int, list[d.CurvePoint]] = {t: [] for t in trial_ids}
    if not trial_ids:
        return out
    C = m.CurveRow
    q = (
        select(C.trial_id, C.fold, C.step, C.value)
        .where(C.trial_id.in_(trial_ids))
        .order_by(C.trial_id, C.fold, C.step)
    )
    runs: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for tid, fold, step, value in s.execute(q):
        runs.setdefault((tid, fold), []).append((step, value))
    for (tid, fold), points in runs.items():
        kept = points if per_fold is None else thin(points, per_fold)
        out[tid].extend(d.CurvePoint(fold, step, value) for step, value in kept)
    return out


class ResultStore(Store):
    def finished_after(self, campaign_id: int, finish_seq: int) -> list[d.Trial]:
        """Trials (without folds) that reached a final state after ``finish_seq``, in order
        (on every acquisition: Core rows, a prebuilt statement)."""
        rows = self.s.connection().execute(_FINISHED_AFTER, {"cid": campaign_id, "seq": finish_seq})
        return [mapping.trial(r) for r in rows]

    def last_finished(self, campaign_id: int, n: int) -> list[tuple[str, str | None]]:
        """(state, failure signature) of the campaign's ``n`` trials that finished last,
        the last first."""
        T = m.TrialRow
        q = (
            select(T.state, T.failure)
            .where(T.campaign_id == campaign_id, T.finish_seq.is_not(None))
            .order_by(T.finish_seq.desc())
            .limit(n)
        )
        return [(str(state), failure) for state, failure in self.s.execute(q)]

    def values_at(self, campaign_id: int, fold: int, step: int, states: Iterable[d.TrialState]) -> dict[int, float]:
        """{trial id: value} at one (fold, step) of the campaign's trials in ``states``:
        what the pruners compare a new report with."""
        q = (
            select(m.CurveRow.trial_id, m.CurveRow.value)
            .join(m.TrialRow, m.TrialRow.id == m.CurveRow.trial_id)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state.in_(list(states)))
            .where(m.CurveRow.fold == fold, m.CurveRow.step == step)
        )
        return {tid: float(v) for tid, v in self.s.execute(q)}

    def completed_folds(self, campaign_id: int) -> dict[int, tuple[int, list[float]]]:
        """{trial id: (number, fold values by index)} of the campaign's COMPLETED trials."""
        q = (
            select(m.TrialRow.id, m.TrialRow.number, m.FoldRow.index, m.FoldRow.value)
            .join(m.FoldRow, m.FoldRow.trial_id == m.TrialRow.id)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == _COMPLETED)
            .where(m.FoldRow.finished.is_(True), m.FoldRow.value.is_not(None))
            .order_by(m.TrialRow.id, m.FoldRow.index)
        )
        out: dict[int, tuple[int, list[float]]] = {}
        for tid, number, _, value in self.s.execute(q):
            out.setdefault(tid, (number, []))[1].append(float(value or 0.0))  # not None: filtered
        return out

    def fold_metrics(self, campaign_id: int, limit: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(trial params, fold metrics) of the campaign's most recently updated folds
        that reported any metrics, at most ``limit`` (the planner's measurements)."""
        q = (
            select(m.TrialRow.params, m.FoldRow.metrics)
            .join(m.FoldRow, m.FoldRow.trial_id == m.TrialRow.id)
            .where(m.TrialRow.campaign_id == campaign_id)
            .order_by(m.FoldRow.updated_at.desc())
            .limit(limit)
        )
        return [(dict(params or {}), dict(metrics or {})) for params, metrics in self.s.execute(q)]

    def probes(self, campaign_id: int, limit: int) -> list[tuple[str, int, int, float, int]]:
        """(scheme, ranks, nodes, samples per second, train samples) of the campaign's
        throughput probes, newest first, at most ``limit``."""
        r = m.ThroughputProbeRow
        q = (
            select(r.scheme, r.ranks, r.nodes, r.samples_per_second, r.train_samples)
            .where(r.campaign_id == campaign_id)
            .order_by(r.id.desc())
            .limit(limit)
        )
        return [(str(a), int(b), int(c), float(x), int(t)) for a, b, c, x, t in self.s.execute(q)]

    def completed_points(self, campaign_id: int) -> list[tuple[int, int, float, float | None, dict[str, Any]]]:
        """(id, number, value, value_std, params) of every COMPLETED trial, by number:
        the columns the dashboard's plots need, without folds."""
        return [r[:5] for r in self.completed_points_at(campaign_id)]

    def completed_points_at(
        self, campaign_id: int
    ) -> list[tuple[int, int, float, float | None, dict[str, Any], datetime | None, float | None, str]]:
        """:meth:`completed_points` with each trial's finish time, violation and what it
        broke (None and "": the campaign has no constraints)."""
        T = m.TrialRow
        q = (
            select(T.id, T.number, T.value, T.value_std, T.params, T.finished_at, T.violation, T.broken)
            .where(T.campaign_id == campaign_id, T.state == _COMPLETED, T.value.is_not(None))
            .order_by(T.number)
        )
        return [(r[0], r[1], float(r[2]), r[3], dict(r[4]), r[5], r[6], r[7] or "") for r in self.s.execute(q)]

    def completed_values(self, campaign_id: int, feasible: bool = False) -> list[tuple[int, list[float]]]:
        """(id, values) of every COMPLETED trial of a multi-objective campaign, by number;
        ``feasible``: of those that satisfy the campaign's constraints (the Pareto front
        is theirs)."""
        q = (
            select(m.TrialRow.id, m.TrialRow.values)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == _COMPLETED)
            .where(m.TrialRow.values.is_not(None))
            .order_by(m.TrialRow.number)
        )
        if feasible:
            q = q.where(_FEASIBLE)
        return [(r[0], [float(v) for v in r[1]]) for r in self.s.execute(q) if r[1] is not None]

    def best_trial_ids(self, campaign_id: int, direction: str, limit: int) -> list[int]:
        """Ids of the ``limit`` best COMPLETED trials, feasible ones first."""
        order = m.TrialRow.value.asc() if direction == "minimize" else m.TrialRow.value.desc()
        q = (
            select(m.TrialRow.id)
            .where(m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == _COMPLETED)
            .where(m.TrialRow.value.is_not(None))
            .order_by(FEASIBLE_FIRST, order, m.TrialRow.id)
            .limit(limit)
        )
        return list(self.s.scalars(q))

    def best_trials(self, campaigns: list[d.Campaign]) -> dict[int, d.Trial]:
        """The best COMPLETED trial of each campaign that has one: its best feasible
        trial, or while none is feasible the one that breaks its constraints least
        (``Trial.feasible`` says which). A population-based
        training campaign's best is its best *final* interval (trained to the campaign's
        last epoch): an earlier interval's value is that of a model that trained on, so
        its best member, not its best interval, is the campaign's result."""
        out = {}
        for c in campaigns:
            order = m.TrialRow.value.asc() if c.direction == "minimize" else m.TrialRow.value.desc()
            q = select(m.TrialRow).where(m.TrialRow.campaign_id == c.id, m.TrialRow.state == _COMPLETED)
            last = c.final_epoch
            if last is not None:
                q = q.where(m.TrialRow.lineage["stop_epoch"].as_integer() >= last)
            row = self.s.scalars(q.order_by(FEASIBLE_FIRST, order, m.TrialRow.id).limit(1)).one_or_none()
            if row is not None:
                out[c.id] = mapping.trial(row)
        return out

    def curves_of(
        self, trial_ids: list[int], per_fold: int | None = READ_POINTS_PER_FOLD
    ) -> dict[int, list[d.CurvePoint]]:
        """Learning-curve points of several trials, by trial id, in (fold, step) order:
        at most ``per_fold`` of each fold (thinned by hpcopt_server.curves; None: all)."""
        return curves_of(self.s, trial_ids, per_fold)
