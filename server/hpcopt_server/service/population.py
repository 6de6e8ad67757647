"""A population-based training campaign's population over time (``algorithm: pbt``):
every interval with its lineage, and the ancestry of the best member with the schedule
of each hyper-parameter along it. The dashboard's "Population" card and
``GET /campaigns/{id}/population`` serve it."""

from __future__ import annotations

from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.service.context import Context, campaign_or_404

#: The most intervals one document holds (the campaign's first, by number).
MAX_INTERVALS = 20_000


class PopulationService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def document(self, campaign_id: int) -> dict[str, Any]:
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            trials, total = tx.trials.page(campaign_id, with_folds=False, limit=MAX_INTERVALS)
        return population(campaign, trials, truncated=total > len(trials))


def population(campaign: d.Campaign, trials: list[d.Trial], *, truncated: bool = False) -> dict[str, Any]:
    """The document for ``trials`` (a campaign's, by number)."""
    intervals = [t for t in trials if t.lineage is not None]
    by_number = {t.number: t for t in intervals}
    unreadable = {n for t in intervals if t.lineage is not None for n in t.lineage.unreadable}
    sign = 1.0 if campaign.direction == "minimize" else -1.0
    done = [t for t in intervals if t.state == d.TrialState.COMPLETED and t.value is not None]
    ancestry: list[int] = []
    if done:
        furthest = max(t.lineage.stop_epoch for t in done if t.lineage is not None)
        best = min(
            (t for t in done if t.lineage is not None and t.lineage.stop_epoch == furthest),
            key=lambda t: (sign * float(t.value or 0.0), t.number),
        )
        node: d.Trial | None = best
        while node is not None and node.number not in ancestry:
            ancestry.append(node.number)
            parent = node.lineage.parent if node.lineage is not None else None
            node = by_number.get(parent) if parent is not None else None
        ancestry.reverse()
    schedule = {
        name: [
            {
                "start_epoch": by_number[n].lineage.start_epoch,  # type: ignore[union-attr]
                "stop_epoch": by_number[n].lineage.stop_epoch,  # type: ignore[union-attr]
                "value": by_number[n].params.get(name),
            }
            for n in ancestry
        ]
        for name in campaign.spec["space"]
    }
    return {
        "algorithm": campaign.algorithm,
        "direction": campaign.direction,
        "intervals": [_interval(t, t.number in unreadable) for t in intervals],
        "ancestry": ancestry,
        "schedule": schedule,
        "truncated": truncated,
    }


def _interval(t: d.Trial, unreadable: bool) -> dict[str, Any]:
    assert t.lineage is not None
    lin = t.lineage
    return {
        "number": t.number,
        "id": t.id,
        "state": t.state,
        "value": t.value,
        "member": lin.member,
        "start_epoch": lin.start_epoch,
        "stop_epoch": lin.stop_epoch,
        "parent": lin.parent,
        "previous": lin.previous,
        "exploited": lin.exploited,
        "changed": lin.changed,
        "params": t.params,
        "unreadable": list(lin.unreadable),
        "checkpoints_unreadable": unreadable,
    }
