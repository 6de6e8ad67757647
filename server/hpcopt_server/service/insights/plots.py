"""The campaign page's plots: downsampled plot data (values, parameters, the
empirical distribution), its revision for conditional GETs, and learning curves."""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Sequence
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.campaigns import front_ids
from hpcopt_server.service.context import campaign_or_404, revisions
from hpcopt_server.service.insights.base import EDF_POINTS, MAX_CURVE_TRIALS, MAX_PLOT_POINTS, InsightBase
from hpcopt_server.service.limits import require_id, require_range
from hpcopt_server.service.robust import robust_limit


class Plots(InsightBase):
    def plot_data(self, campaign_id: int, max_points: int = 2000) -> dict[str, Any]:
        """Completed trials for the history, parallel-coordinate and slice plots.

        ``best`` is the best-so-far line over *all* completed trials (only the points
        where it changes). ``points`` holds every completed trial when there are at most
        ``max_points``; otherwise every trial that improved the best, the best tenth of
        the budget, and an even sample of the rest, the same trials from one answer to the
        next (``downsampled`` says so).
        ``objectives`` gives each objective its own best line, empirical distribution and
        robust axis limit (:func:`robust_limit`); ``ended`` the PRUNED and FAILED trials,
        and a multi-fidelity campaign's PAUSED ones (at most ``max_points``, evenly over
        their numbers; ``ended_total`` counts all). ``partial``: the campaign's PRUNED and
        PAUSED values are one-rung estimates (fewer folds or epochs: ``algorithm: mf``),
        never K-fold results; every point of ``points`` is one.
        """
        if not 10 <= max_points <= MAX_PLOT_POINTS:
            raise InvalidArgument(
                f"max_points must be in 10..{MAX_PLOT_POINTS}", [("max_points", f"must be in 10..{MAX_PLOT_POINTS}")]
            )
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            rows = tx.results.completed_points_at(campaign_id)
            vectors = dict(tx.results.completed_values(campaign_id)) if len(campaign.objectives) > 1 else {}
            feasible = {tid for tid, _ in tx.results.completed_values(campaign_id, feasible=True)} if vectors else set()
            stopped = (d.TrialState.PRUNED, d.TrialState.FAILED) + ((d.TrialState.PAUSED,) if campaign.promotes else ())
            ended = tx.views.listed_trials(campaign_id, stopped)
        ended_total = len(ended)
        sign = 1.0 if campaign.direction == "minimize" else -1.0
        objectives = []
        infeasible = {r[0] for r in rows if r[6] is not None and r[6] > 0}
        for k, (metric, direction) in enumerate(campaign.objectives):
            column = [(r[0], r[1], vectors[r[0]][k] if vectors else r[2]) for r in rows]
            summary = _summary(column, direction, infeasible)
            objectives.append({"metric": metric, "direction": direction, **summary})
        best = objectives[0]["best"]
        # The first objective's improvements only: another objective's best is on the front,
        # which is always drawn, and its improvements can be every trial (no downsampling).
        improved = {b["trial_id"] for b in best}
        keep = rows
        if len(rows) > max_points:
            by_quality = sorted(rows, key=lambda r: sign * r[2])
            chosen = set(improved) | {r[0] for r in by_quality[: max_points // 10]}
            rest = [r[0] for r in rows if r[0] not in chosen]
            room = max(0, max_points - len(chosen))
            # The sample is the rest's smallest keys, each trial's key fixed by its id: a
            # trial that completes enters or not, and the others stay, so that a live
            # page's plots change only where a completion changed them (a fresh random
            # sample on every completion made every plot redraw everything).
            chosen |= set(heapq.nsmallest(room, rest, key=_sample_key))
            keep = [r for r in rows if r[0] in chosen]
        front = front_ids(campaign, [(i, v) for i, v in vectors.items() if i in feasible]) if vectors else []
        front_size = len(front)
        if len(front) > max_points // 2:  # evenly along the first objective
            front = [front[round(i * (len(front) - 1) / (max_points // 2 - 1))] for i in range(max_points // 2)]
        if len(keep) < len(rows) and front:  # the front is always drawn
            kept = {r[0] for r in keep} | set(front)
            keep = [r for r in rows if r[0] in kept]
        ended.sort(key=lambda r: r.number)
        if len(ended) > max_points:  # evenly over the trial numbers
            ended = [ended[round(i * (len(ended) - 1) / (max_points - 1))] for i in range(max_points)]
        return {
            "metric": campaign.metric,
            "direction": campaign.direction,
            "space": campaign.spec.get("space", {}),
            "completed": len(rows),
            "downsampled": len(keep) < len(rows),
            "ended": [
                {"trial_id": r.id, "number": r.number, "state": r.state, "value": r.value, "finished_at": r.finished_at}
                for r in ended
            ],
            "ended_total": ended_total,
            "partial": campaign.promotes,
            "points": [
                {
                    "trial_id": tid,
                    "number": n,
                    "value": v,
                    "value_std": s,
                    "params": p,
                    "values": vectors.get(tid),
                    "finished_at": at,
                    # Against the constraints: null without any, else true or false
                    # and what it broke (the plots colour by it).
                    "feasible": None if violation is None else violation <= 0,
                    "broken": broken,
                }
                for tid, n, v, s, p, at, violation, broken in keep
            ],
            "edf": objectives[0]["edf"],
            "best": best,
            "objectives": objectives,
            "front": front,
            "front_size": front_size,
        }

    def plot_revision(self, campaign_id: int) -> str:
        """Changes whenever :meth:`plot_data`'s answer may (a trial reached a final
        state): one row read, so a poll of an unchanged campaign costs almost nothing."""
        return revisions(self.ctx, campaign_id)[0]

    def plot_served_revision(self, campaign_id: int, max_points: int) -> str:
        """The revision :meth:`plot` answers with now: the plot data's ETag, before work."""
        return self.ctx.shared.served(("plot", campaign_id, max_points), self.plot_revision(campaign_id))

    def plot(self, campaign_id: int, max_points: int = 2000) -> tuple[str, dict[str, Any]]:
        """(revision, :meth:`plot_data`), shared by every tab (``service/shared_answers.py``)."""
        revision = self.plot_revision(campaign_id)
        return self.ctx.shared.get(
            ("plot", campaign_id, max_points), revision, lambda: self._gated_plot(campaign_id, max_points)
        )

    def _gated_plot(self, campaign_id: int, max_points: int) -> dict[str, Any]:
        with self.ctx.heavy.slot("plot data"):
            return self.plot_data(campaign_id, max_points)

    def curves(
        self, campaign_id: int, trial_ids: list[int], limit: int = 5, numbers: Sequence[int] = ()
    ) -> list[dict[str, Any]]:
        """Learning curves (per fold) of the given trials (by id, or by campaign-local
        number), or of the ``limit`` best."""
        if len(trial_ids) + len(numbers) > MAX_CURVE_TRIALS or not 1 <= limit <= MAX_CURVE_TRIALS:
            raise InvalidArgument(
                f"at most {MAX_CURVE_TRIALS} trials at once", [("trial_id", f"at most {MAX_CURVE_TRIALS}")]
            )
        for t in trial_ids:
            require_id("trial_id", t)
        for n in numbers:
            require_range("number", n, 0)
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            by_number = (tx.views.trial_id_by_number(campaign_id, n) for n in numbers)
            trial_ids = [*trial_ids, *(t for t in by_number if t is not None and t not in trial_ids)]
            if not trial_ids and not numbers:
                trial_ids = tx.results.best_trial_ids(campaign_id, campaign.direction, limit)
            found = (tx.trials.get(t, folds=False) for t in trial_ids)
            trials = {t.id: t for t in found if t is not None and t.campaign_id == campaign_id}
            points = tx.results.curves_of(list(trials))
        return [
            {
                "trial_id": tid,
                "number": trials[tid].number,
                "value": trials[tid].value,
                "state": trials[tid].state.value,
                "points": [{"fold": p.fold, "step": p.step, "value": p.value} for p in pts],
            }
            for tid, pts in points.items()
        ]


def _summary(rows: list[tuple[int, int, float]], direction: str, infeasible: Collection[int] = ()) -> dict[str, Any]:
    """One objective's best-so-far line (of the feasible trials), empirical distribution
    and robust axis limit over (trial id, number, value) rows in finishing order."""
    sign = 1.0 if direction == "minimize" else -1.0
    best, current = [], math.inf
    for tid, number, value in rows:
        if sign * value < current and tid not in infeasible:
            current = sign * value
            best.append({"number": number, "value": value, "trial_id": tid})
    values = sorted(v for _, _, v in rows)
    limit = robust_limit(values, direction)
    off = 0 if limit is None else sum(1 for v in values if sign * v > sign * limit)
    return {"best": best, "edf": _quantiles(values), "limit": limit, "off_scale": off}


def _quantiles(values: list[float]) -> list[float]:
    """At most EDF_POINTS values spread evenly over the sorted ``values`` (all when fewer;
    the least and the greatest always): the empirical distribution of every completed
    trial, not of the plot's sample."""
    n = len(values)
    if n <= EDF_POINTS:
        return values
    return [values[round(i * (n - 1) / (EDF_POINTS - 1))] for i in range(EDF_POINTS)]


def _sample_key(trial_id: int) -> int:
    """A trial's place in the plot data's sample: Knuth's multiplicative hash of its id,
    spread evenly over the ids and the same in every answer."""
    return (trial_id * 2654435761) % 2**32
