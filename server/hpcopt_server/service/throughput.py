"""The planner's measurements, per campaign: the throughput of a fold group at each
width, read from what folds already report (``samples_per_second`` with the
``ranks_per_fold`` and ``fold_nodes`` it was measured at, every epoch), and the
scaling model fitted on them (``hpcopt.planner``). Agents get the points with their
registration (``--groups auto`` plans from them instead of probing); REST shows the
points and the model (``GET /campaigns/{id}/throughput``)."""

from __future__ import annotations

from typing import Any

from hpcopt.planner import PlanError, fit, points_from_folds, train_samples_of
from hpcopt_server.service.context import Context, campaign_or_404

#: The most recent folds read for the points (enough for a median per width).
RECENT_FOLDS = 2000


class ThroughputService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def document(self, campaign_id: int) -> dict[str, Any]:
        """The points and, per scheme with any, the fitted model (its coefficients,
        median relative error and assumptions)."""
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            rows = tx.results.fold_metrics(campaign_id, RECENT_FOLDS)
        points = points_from_folds(rows, campaign.spec)
        models: dict[str, Any] = {}
        for scheme in sorted({p.scheme for p in points}):
            try:
                models[scheme] = fit(p for p in points if p.scheme == scheme).as_dict()
            except PlanError:  # not reachable with points; kept so one scheme never hides the rest
                continue
        return {"points": [p.as_dict() for p in points], "models": models, "train_samples": train_samples_of(rows)}
