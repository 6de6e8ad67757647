"""What the dashboard shows, aggregated on the server so that a campaign with tens of
thousands of trials stays fast to open: downsampled plot data, learning curves of
chosen trials, agents with their current trial and health, and a CSV of the trials."""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.campaigns import front_ids
from hpcopt_server.service.context import Context, campaign_or_404
from hpcopt_server.service.limits import require_id

MAX_PLOT_POINTS = 20_000
MAX_CURVE_TRIALS = 50


@dataclass(frozen=True)
class AgentView:
    agent: d.Agent
    current_trial_id: int | None
    lease_expires_at: datetime | None
    #: No heartbeat for two heartbeat periods: the lease is at risk.
    stale: bool


class InsightService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def plot_data(self, campaign_id: int, max_points: int = 2000) -> dict[str, Any]:
        """Completed trials for the history, parallel-coordinate and slice plots.

        ``best`` is the best-so-far line over *all* completed trials (only the points
        where it changes). ``points`` holds every completed trial when there are at most
        ``max_points``; otherwise every trial that improved the best, the best tenth of
        the budget, and an even random sample of the rest (``downsampled`` says so).
        """
        if not 10 <= max_points <= MAX_PLOT_POINTS:
            raise InvalidArgument(
                f"max_points must be in 10..{MAX_PLOT_POINTS}", [("max_points", f"must be in 10..{MAX_PLOT_POINTS}")]
            )
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            rows = tx.completed_points(campaign_id)
            vectors = dict(tx.completed_values(campaign_id)) if len(campaign.objectives) > 1 else {}
        sign = 1.0 if campaign.direction == "minimize" else -1.0
        best: list[dict[str, Any]] = []
        improved: set[int] = set()
        current = math.inf
        for tid, number, value, _, _ in rows:
            if sign * value < current:
                current = sign * value
                improved.add(tid)
                best.append({"number": number, "value": value, "trial_id": tid})
        keep = rows
        if len(rows) > max_points:
            by_quality = sorted(rows, key=lambda r: sign * r[2])
            chosen = set(improved) | {r[0] for r in by_quality[: max_points // 10]}
            rest = [r[0] for r in rows if r[0] not in chosen]
            room = max(0, max_points - len(chosen))
            chosen |= set(random.Random(campaign_id).sample(rest, min(room, len(rest))))
            keep = [r for r in rows if r[0] in chosen]
        front = front_ids(campaign, list(vectors.items())) if vectors else []
        front_size = len(front)
        if len(front) > max_points // 2:  # evenly along the first objective
            front = [front[round(i * (len(front) - 1) / (max_points // 2 - 1))] for i in range(max_points // 2)]
        if len(keep) < len(rows) and front:  # the front is always drawn
            kept = {r[0] for r in keep} | set(front)
            keep = [r for r in rows if r[0] in kept]
        return {
            "metric": campaign.metric,
            "direction": campaign.direction,
            "space": campaign.spec.get("space", {}),
            "completed": len(rows),
            "downsampled": len(keep) < len(rows),
            "points": [
                {"trial_id": tid, "number": n, "value": v, "value_std": s, "params": p, "values": vectors.get(tid)}
                for tid, n, v, s, p in keep
            ],
            "best": best,
            "objectives": [{"metric": m, "direction": dr} for m, dr in campaign.objectives],
            "front": front,
            "front_size": front_size,
        }

    def curves(self, campaign_id: int, trial_ids: list[int], limit: int = 5) -> list[dict[str, Any]]:
        """Learning curves (per fold) of the given trials, or of the ``limit`` best."""
        if len(trial_ids) > MAX_CURVE_TRIALS or not 1 <= limit <= MAX_CURVE_TRIALS:
            raise InvalidArgument(
                f"at most {MAX_CURVE_TRIALS} trials at once", [("trial_id", f"at most {MAX_CURVE_TRIALS}")]
            )
        for t in trial_ids:
            require_id("trial_id", t)
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            if not trial_ids:
                trial_ids = tx.best_trial_ids(campaign_id, campaign.direction, limit)
            found = (tx.get_trial(t, folds=False) for t in trial_ids)
            trials = {t.id: t for t in found if t is not None and t.campaign_id == campaign_id}
            points = tx.curves_of(list(trials))
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

    def agents(self, campaign_id: int) -> list[AgentView]:
        now = self.ctx.clock()
        at_risk = timedelta(seconds=2 * self.ctx.settings.heartbeat_seconds)
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            agents = tx.list_agents(campaign_id)
            running = tx.running_by_agent(campaign_id)
        out = []
        for a in agents:
            trial_id, expires = running.get(a.id, (None, None))
            out.append(AgentView(a, trial_id, expires, trial_id is not None and now - a.last_seen_at > at_risk))
        return out

    def trials_csv(self, campaign_id: int) -> str:
        """One row per trial: ids, state, attempt, value ± std, params, times, agent."""
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            trials, _ = tx.list_trials(campaign_id, with_folds=False)
        names = list(campaign.spec.get("space", {}))
        others = [metric for metric, _ in campaign.objectives[1:]]  # a multi-objective campaign's
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(
            ["trial_id", "number", "state", "attempt", campaign.metric, f"{campaign.metric}_std", *others,
             *[f"param_{n}" for n in names], "started_at", "finished_at", "agent_id", "error"]
        )  # fmt: skip
        for t in trials:
            values = [_num(v) for v in t.values[1:]] if t.values else [""] * len(others)
            writer.writerow(
                [t.id, t.number, t.state.value, t.attempt, _num(t.value), _num(t.value_std), *values,
                 *[t.params.get(n, "") for n in names],
                 t.started_at.isoformat() if t.started_at else "", t.finished_at.isoformat() if t.finished_at else "",
                 t.agent_id, t.error.splitlines()[0] if t.error else ""]
            )  # fmt: skip
        return out.getvalue()


def _num(v: float | None) -> str:
    return "" if v is None else repr(v)
