"""The planner's measurements, per campaign: the throughput of a fold group at each
width, read from what folds already report (``samples_per_second`` with the
``ranks_per_fold`` and ``fold_nodes`` it was measured at, every epoch) and, at widths no
fold has trained at, from what an agent's probe measured (``ReportThroughput``); and
the scaling model fitted on them (``hpcopt.planner``). Agents get the points with
their registration and the Queue call (``--groups auto`` plans from them instead of
probing); REST shows the points and the model (``GET /campaigns/{id}/throughput``)."""

from __future__ import annotations

from typing import Any

from hpcopt.planner import PlanError, Point, fit, merge_points, points_from_folds, points_from_probes, train_samples_of
from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service import limits as lim
from hpcopt_server.service.context import Context, campaign_or_404
from hpcopt_server.storage.repository import Tx

#: The most recent folds read for the points (enough for a median per width).
RECENT_FOLDS = 2000
#: The most recent probe measurements read (a probe stores a few widths per job).
RECENT_PROBES = 200
#: The most widths one probe report may carry (a probe measures two or three).
MAX_PROBE_POINTS = 16
#: The widest fold group a point may describe, in ranks.
MAX_RANKS = 1_000_000


def campaign_schemes(spec: dict[str, Any]) -> set[str]:
    """The schemes a campaign trains with (``scheme: search``: the ``scheme`` choices)."""
    training = spec.get("training") or {}
    scheme = str(training.get("scheme", "allreduce"))
    if scheme != "search":
        return {scheme}
    return {str(c) for c in ((spec.get("space") or {}).get("scheme") or {}).get("choices", [])}


def check_probe(points: list[tuple[str, int, int, float]], train_samples: int) -> list[tuple[str, int, int, float]]:
    """A probe report's points, each field in range, or :class:`InvalidArgument` naming it."""
    if not 1 <= len(points) <= MAX_PROBE_POINTS:
        raise InvalidArgument(
            f"points: a probe reports 1..{MAX_PROBE_POINTS} widths, got {len(points)}",
            [("points", f"must hold 1..{MAX_PROBE_POINTS} widths")],
        )
    lim.require_range("train_samples", train_samples, 1)
    out = []
    for n, (scheme, ranks, nodes, rate) in enumerate(points):
        lim.require_text(f"points[{n}].scheme", scheme, lim.MAX_SHORT)
        lim.require_range(f"points[{n}].ranks", ranks, 1, MAX_RANKS)
        lim.require_range(f"points[{n}].nodes", nodes, 1, ranks)
        lim.require_finite(f"points[{n}].samples_per_second", rate)
        if rate <= 0:
            raise InvalidArgument(
                f"points[{n}].samples_per_second must be positive, got {rate}",
                [(f"points[{n}].samples_per_second", "must be positive")],
            )
        out.append((scheme, ranks, nodes, float(rate)))
    return out


def measured(tx: Tx, campaign: d.Campaign) -> tuple[list[Point], int | None]:
    """The campaign's points (folds first, the probes' where no fold measured that
    width) and the training samples per fold-epoch they were measured at."""
    rows = tx.results.fold_metrics(campaign.id, RECENT_FOLDS)
    probes = tx.results.probes(campaign.id, RECENT_PROBES)
    points = merge_points(points_from_folds(rows, campaign.spec), points_from_probes(p[:4] for p in probes))
    samples = train_samples_of(rows)
    if samples is None and probes:
        samples = probes[0][4]
    return points, samples


class ThroughputService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def document(self, campaign_id: int) -> dict[str, Any]:
        """The points and, per scheme with any, the fitted model (its coefficients,
        median relative error and assumptions)."""
        with self.ctx.storage.read() as tx:
            points, samples = measured(tx, campaign_or_404(tx, campaign_id))
        models: dict[str, Any] = {}
        for scheme in sorted({p.scheme for p in points}):
            try:
                models[scheme] = fit(p for p in points if p.scheme == scheme).as_dict()
            except PlanError:  # not reachable with points; kept so one scheme never hides the rest
                continue
        return {"points": [p.as_dict() for p in points], "models": models, "train_samples": samples}
