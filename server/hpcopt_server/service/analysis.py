"""Hyper-parameter importance as a service: reads a campaign's completed trials, then
runs the numbers (``importance.py``, where the two methods are described) in a child
process with a memory and a time limit (``worker.py``), in one of the server's few
slots for costly reads (``heavy.py``); identical requests share one answer
(``shared_answers.py``)."""

from __future__ import annotations

from typing import Any

from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.context import Context, campaign_or_404, revisions
from hpcopt_server.service.importance import METHODS, MIN_TRIALS, Importance, compute
from hpcopt_server.service.worker import run_limited

__all__ = ["METHODS", "AnalysisService", "Importance"]


class AnalysisService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def importance(
        self, campaign_id: int, objective: int = 0, method: str = "first-order"
    ) -> tuple[list[Importance], int]:
        """Importances for objective number ``objective`` (0: the first) by ``method``
        (one of METHODS), most important first, and the completed trials they rest on
        (none below MIN_TRIALS completed trials); shared by every tab (``shared_answers.py``)."""
        if method not in METHODS:
            raise InvalidArgument(
                f"method must be one of {list(METHODS)}, got {method!r}", [("method", f"allowed: {list(METHODS)}")]
            )
        revision = revisions(self.ctx, campaign_id)[0]
        key = ("importance", campaign_id, objective, method)
        return self.ctx.shared.get(key, revision, lambda: self._gated(campaign_id, objective, method))[1]

    def _gated(self, campaign_id: int, objective: int, method: str) -> tuple[list[Importance], int]:
        with self.ctx.heavy.slot("importance"):
            return self._importance(campaign_id, objective, method)

    def _importance(self, campaign_id: int, objective: int, method: str) -> tuple[list[Importance], int]:
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            if not 0 <= objective < len(campaign.objectives):
                n = len(campaign.objectives)
                raise InvalidArgument(
                    f"objective {objective}: campaign {campaign_id} has {n} objective(s), numbered 0..{n - 1}",
                    [("objective", f"must be in 0..{n - 1}")],
                )
            rows = tx.results.completed_points(campaign_id)
            vectors = dict(tx.results.completed_values(campaign_id)) if objective else {}
        space: dict[str, Any] = campaign.spec.get("space", {})
        if objective:  # the trials that reported every objective
            rows = [(*r[:2], vectors[r[0]][objective], *r[3:]) for r in rows if r[0] in vectors]
        sign = 1.0 if campaign.objectives[objective][1] == "minimize" else -1.0
        params, values = [r[4] for r in rows], [sign * r[2] for r in rows]
        if len(rows) < MIN_TRIALS:
            return [], len(rows)
        return run_limited(f"{method} importance", compute, space, params, values, method, campaign_id)
