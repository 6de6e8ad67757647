"""The planner's measurements, per campaign: the throughput of a fold group at each
width, read from what folds already report (``samples_per_second`` with the
``ranks_per_fold`` and ``fold_nodes`` it was measured at, every epoch) and, at widths no
fold has trained at, from what an agent's probe measured (``ReportThroughput``); and
the scaling model fitted on them (``hpcopt.core.planner``). Agents get the points with
their registration and the Queue call (``--groups auto`` plans from them instead of
probing); REST shows the points and the model (``GET /campaigns/{id}/throughput``)."""

from __future__ import annotations

import statistics
from typing import Any

from hpcopt.core.planner import (
    MAX_RATE_PER_RANK,
    MIN_RATE_PER_RANK,
    Point,
    fit,
    merge_points,
    plausible,
    points_from_folds,
    points_from_probes,
    train_samples_of,
)
from hpcopt.errors import PlanError
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
#: A probe's rate per rank may differ from the campaign's folds' median rate per rank
#: (same scheme) by at most this factor, up or down.
FOLD_FACTOR = 100.0
#: Probe rows kept per campaign (one per agent and width); past it the oldest go.
MAX_PROBE_ROWS = 1000


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
        low, high = MIN_RATE_PER_RANK * ranks, MAX_RATE_PER_RANK * ranks
        if not low <= rate <= high:
            raise InvalidArgument(
                f"points[{n}].samples_per_second: {rate:g} at {ranks} rank(s) is outside {low:g}..{high:g} "
                f"({MIN_RATE_PER_RANK:g} to {MAX_RATE_PER_RANK:g} samples per second per rank)",
                [(f"points[{n}].samples_per_second", f"must be in {low:g}..{high:g} at {ranks} rank(s)")],
            )
        out.append((scheme, ranks, nodes, float(rate)))
    return out


def check_against_folds(points: list[tuple[str, int, int, float]], folds: list[Point]) -> None:
    """InvalidArgument naming the first probe point whose rate per rank is more than
    :data:`FOLD_FACTOR` away from the median rate per rank the campaign's folds
    measured with its scheme (no check for a scheme no fold has trained with)."""
    for n, (scheme, ranks, _, rate) in enumerate(points):
        mine = [p.samples_per_second / p.ranks for p in folds if p.scheme == scheme]
        if not mine:
            continue
        ref = statistics.median(mine)
        low, high = ref / FOLD_FACTOR * ranks, ref * FOLD_FACTOR * ranks
        if not low <= rate <= high:
            raise InvalidArgument(
                f"points[{n}].samples_per_second: {rate:g} at {ranks} rank(s) is not within {FOLD_FACTOR:g}x of "
                f"what this campaign's {scheme} folds measured ({ref:.4g} samples per second per rank): "
                f"allowed {low:.4g}..{high:.4g}",
                [(f"points[{n}].samples_per_second", f"must be in {low:.4g}..{high:.4g}")],
            )


def measured(tx: Tx, campaign: d.Campaign) -> tuple[list[Point], int | None]:
    """The campaign's points (folds first, the probes' where no fold measured that
    width) and the training samples per fold-epoch they were measured at."""
    rows = tx.results.fold_metrics(campaign.id, RECENT_FOLDS)
    probes = tx.results.probes(campaign.id, RECENT_PROBES)
    probed = [p for p in points_from_probes(p[:4] for p in probes) if plausible(p)]
    points = merge_points(_fold_points(rows, campaign), probed)
    samples = train_samples_of(rows)
    if samples is None and probes:
        samples = probes[0][4]
    return points, samples


def measured_folds(tx: Tx, campaign: d.Campaign) -> list[Point]:
    """The campaign's plausible points from its trained folds only."""
    return _fold_points(tx.results.fold_metrics(campaign.id, RECENT_FOLDS), campaign)


def _fold_points(rows: list[tuple[dict[str, Any], dict[str, Any]]], campaign: d.Campaign) -> list[Point]:
    return [p for p in points_from_folds(rows, campaign.spec) if plausible(p)]


class ThroughputService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def document(self, campaign_id: int) -> dict[str, Any]:
        """The points and, per scheme with any, the fitted model (its coefficients,
        median relative error, assumptions, and whether a fold ``confirmed`` it).
        Implausible stored points are left out (``planner.plausible``)."""
        with self.ctx.storage.read() as tx:
            points, samples = measured(tx, campaign_or_404(tx, campaign_id))
        models: dict[str, Any] = {}
        for scheme in sorted({p.scheme for p in points}):
            try:
                models[scheme] = fit(p for p in points if p.scheme == scheme).as_dict()
            except PlanError:  # not reachable with points; kept so one scheme never hides the rest
                continue
        return {"points": [p.as_dict() for p in points], "models": models, "train_samples": samples}
