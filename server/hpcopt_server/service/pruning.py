"""Where pruners meet SQL: the campaign history they read.

A decision is made on committed data after the report it is about is stored; the PRUNED
transition is storage's (``AgentCalls.prune``), under the campaign lock and only if the
lease still holds, so a trial is pruned at most once.
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcopt_server import domain as d
from hpcopt_server.pruners import Pruner, make_pruner
from hpcopt_server.storage.repository import Tx


class SqlHistory:
    """:class:`hpcopt_server.pruners.History` on an open transaction."""

    def __init__(self, tx: Tx, campaign_id: int):
        self.tx, self.campaign_id = tx, campaign_id

    def values_at(self, fold: int, step: int, states: Sequence[d.TrialState]) -> dict[int, float]:
        return self.tx.results.values_at(self.campaign_id, fold, step, states)

    def curve(self, trial_id: int, fold: int) -> list[tuple[int, float]]:
        return [(p.step, p.value) for p in self.tx.results.curves_of([trial_id], None)[trial_id] if p.fold == fold]

    def completed_folds(self) -> dict[int, tuple[int, list[float]]]:
        return self.tx.results.completed_folds(self.campaign_id)


def pruner_of(campaign: d.Campaign) -> Pruner | None:
    """The campaign's pruner; None for ``none`` (no locking, no reads)."""
    spec = campaign.spec.get("pruner") or {}
    return make_pruner(campaign.spec) if spec.get("name", "none") != "none" else None
