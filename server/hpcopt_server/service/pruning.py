"""Where pruners meet SQL: the campaign history they read, and the PRUNED transition.

A decision is made inside the transaction that stores the report it is about, with the
campaign row locked (the lock order of every writer: campaign, then trial), so two
replicas never decide from different data and a trial is pruned at most once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from hpcopt_server import domain as d
from hpcopt_server.pruners import Pruner, Verdict, make_pruner
from hpcopt_server.service.context import finish_campaign_if_done
from hpcopt_server.storage.repository import Tx


class SqlHistory:
    """:class:`hpcopt_server.pruners.History` on an open transaction."""

    def __init__(self, tx: Tx, campaign_id: int):
        self.tx, self.campaign_id = tx, campaign_id

    def values_at(self, fold: int, step: int, states: Sequence[d.TrialState]) -> dict[int, float]:
        return self.tx.values_at(self.campaign_id, fold, step, states)

    def curve(self, trial_id: int, fold: int) -> list[tuple[int, float]]:
        return [(p.step, p.value) for p in self.tx.curves_of([trial_id], None)[trial_id] if p.fold == fold]

    def completed_folds(self) -> dict[int, tuple[int, list[float]]]:
        return self.tx.completed_folds(self.campaign_id)


def pruner_of(campaign: d.Campaign) -> Pruner | None:
    """The campaign's pruner; None for ``none`` (no locking, no reads)."""
    spec = campaign.spec.get("pruner") or {}
    return make_pruner(campaign.spec) if spec.get("name", "none") != "none" else None


def prune(tx: Tx, campaign: d.Campaign, trial: d.Trial, verdict: Verdict, now: datetime) -> None:
    """RUNNING -> PRUNED with the value it reached and the pruner's reason (call with the
    campaign row locked). The agent learns it from its next report or heartbeat."""
    tx.finish_trial(trial.id, d.TrialState.PRUNED, now, value=verdict.value, error=verdict.reason)
    tx.add_event(trial.id, trial.attempt, "pruned", now, agent_id=trial.agent_id, reason=verdict.reason)
    finish_campaign_if_done(tx, campaign, now)
