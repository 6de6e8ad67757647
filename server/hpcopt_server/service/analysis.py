"""Hyper-parameter importance over a campaign's completed trials, for every algorithm.

The method is the first-order (main-effect) share of a functional ANOVA, estimated by
binning rather than by fANOVA's random forest: for each parameter, the trials are put
in bins of that parameter (its choices, or up to 10 quantile bins of its value, on the
log scale for a log parameter), and its importance is the share of the variance of the
objective's *rank* that the bin means explain, corrected for the share that bins
explain by chance (epsilon squared: ``(SS_between - (B - 1) MS_within) / SS_total``,
floored at 0). Ranks make one outlier unable to decide the answer. Shares are then
normalized to sum to 1 over the parameters (``raw`` keeps them unnormalized: a low sum
says interactions or noise dominate). A conditional parameter is judged on the trials
where it is active. O(n log n) per parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.context import Context, campaign_or_404, revisions

MIN_TRIALS = 10
MAX_BINS = 10


@dataclass(frozen=True)
class Importance:
    name: str
    #: Share of the explained rank variance (the shares sum to 1 when any is positive).
    importance: float
    #: Epsilon squared before normalizing.
    raw: float
    #: Trials it was judged on.
    trials: int


class AnalysisService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def importance(self, campaign_id: int, objective: int = 0) -> tuple[list[Importance], int]:
        """Importances for objective number ``objective`` (0: the first), most important
        first, and the completed trials they rest on (none below MIN_TRIALS completed
        trials); shared by every tab (``shared_answers.py``)."""
        revision = revisions(self.ctx, campaign_id)[0]
        key = ("importance", campaign_id, objective)
        return self.ctx.shared.get(key, revision, lambda: self._importance(campaign_id, objective))[1]

    def _importance(self, campaign_id: int, objective: int) -> tuple[list[Importance], int]:
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            if not 0 <= objective < len(campaign.objectives):
                n = len(campaign.objectives)
                raise InvalidArgument(
                    f"objective {objective}: campaign {campaign_id} has {n} objective(s), numbered 0..{n - 1}",
                    [("objective", f"must be in 0..{n - 1}")],
                )
            rows = tx.completed_points(campaign_id)
            vectors = dict(tx.completed_values(campaign_id)) if objective else {}
        space: dict[str, Any] = campaign.spec.get("space", {})
        if objective:  # the trials that reported every objective
            rows = [(*r[:2], vectors[r[0]][objective], *r[3:]) for r in rows if r[0] in vectors]
        if len(rows) < MIN_TRIALS:
            return [], len(rows)
        sign = 1.0 if campaign.objectives[objective][1] == "minimize" else -1.0
        values = np.array([sign * r[2] for r in rows])
        out = []
        for name, spec in space.items():
            present = [i for i, r in enumerate(rows) if r[4].get(name) is not None]
            if len(present) < MIN_TRIALS:
                out.append(Importance(name, 0.0, 0.0, len(present)))
                continue
            bins = _bins([rows[i][4][name] for i in present], spec)
            out.append(Importance(name, 0.0, _epsilon_squared(_ranks(values[present]), bins), len(present)))
        total = sum(x.raw for x in out)
        shares = [Importance(x.name, x.raw / total if total > 0 else 0.0, x.raw, x.trials) for x in out]
        shares.sort(key=lambda x: (-x.importance, x.name))
        return shares, len(rows)


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    return ranks


def _bins(raw: list[Any], spec: dict[str, Any]) -> np.ndarray:
    """A bin index per trial: the choice, or a quantile bin of the (log) value."""
    choices = spec.get("choices")
    if choices is not None:
        labels = [str(c) for c in choices]
        return np.array([labels.index(str(v)) if str(v) in labels else len(labels) for v in raw])
    x = np.array([float(v) for v in raw])
    if spec.get("scale") == "log":
        x = np.log10(np.maximum(x, 1e-300))
    k = max(2, min(MAX_BINS, len(x) // 5))
    edges = np.unique(np.quantile(x, np.linspace(0, 1, k + 1)[1:-1]))
    return np.searchsorted(edges, x, side="right")


def _epsilon_squared(y: np.ndarray, bins: np.ndarray) -> float:
    n = len(y)
    total = float(((y - y.mean()) ** 2).sum())
    labels, inverse, counts = np.unique(bins, return_inverse=True, return_counts=True)
    b = len(labels)
    if total <= 0 or b < 2 or n <= b:
        return 0.0
    means = np.bincount(inverse, weights=y) / counts
    between = float((counts * (means - y.mean()) ** 2).sum())
    within = (total - between) / (n - b)
    eps = (between - (b - 1) * within) / total
    return max(0.0, eps) if math.isfinite(eps) else 0.0
