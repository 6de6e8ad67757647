"""Steering a campaign while it runs: stop a trial, pause and resume, raise the budget.

Each is one transaction under the campaign's row lock, in SQL before it is answered,
and reaches the agents through what they already ask:

- **Stop a trial.** A QUEUED, RUNNING or PAUSED trial becomes CANCELLED, its lease kept: the
  holder's next heartbeat or report is answered CANCELLED and it moves on to its next
  trial. The trial counts against ``max_trials`` like any finished one (raise the
  budget to replace it).
- **Pause.** A PAUSED campaign hands out no trial: acquisitions are answered WAIT, so
  agents keep their allocation and poll. Running trials go on; a campaign whose budget
  finishes meanwhile becomes COMPLETED. **Resume** makes it RUNNING again.
- **Raise the budget.** ``budget.max_trials`` grows; a COMPLETED campaign is RUNNING
  again (agents that were told it was done have exited: start new ones). The new spec
  is validated like a new campaign's. Every server replica reads the budget with the
  campaign's counters under its lock (``agent_sql.TAKE_NUMBERS``, ``COUNT_FINISHED``),
  so a replica's cached spec and optimizer are replaced at its next acquisition.

All need the ``submit`` scope, the scope that cancels a campaign, and the campaign's
owner or an ``admin`` token (``owners.py``).
"""

from __future__ import annotations

import copy
import logging

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound
from hpcopt_server.service.campaigns import validate_spec
from hpcopt_server.service.context import Context, campaign_or_404
from hpcopt_server.service.importing import IMPORTING
from hpcopt_server.service.limits import MAX_EXIT_REASON, require_id, require_range, require_safe_text
from hpcopt_server.service.owners import require_owner

log = logging.getLogger(__name__)

#: What a stop records when no reason is given.
STOPPED = "stopped by a user"


def _who(token: d.ApiToken | None) -> str:
    return f" (token {token.name!r})" if token is not None else ""


class SteeringService:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def stop_trial(self, campaign_id: int, number: int, token: d.ApiToken | None = None, reason: str = "") -> d.Trial:
        """Cancels trial ``number`` of the campaign if it is QUEUED, RUNNING or PAUSED; its agent
        stops at its next heartbeat. FailedPrecondition if it has finished."""
        require_id("campaign_id", campaign_id)
        require_range("number", number, 0)
        require_safe_text("reason", reason, MAX_EXIT_REASON)
        now = self.ctx.clock()
        said = (reason.strip() or STOPPED) + _who(token)
        with self.ctx.storage.write() as tx:
            campaign = campaign_or_404(tx, campaign_id, lock=True)  # the lock order: campaign, then trial
            require_owner(campaign, token, "stop a trial of")
            trial_id = tx.views.trial_id_by_number(campaign_id, number)
            trial = None if trial_id is None else tx.trials.get(trial_id, lock=True, folds=False)
            if trial is None:
                raise NotFound(f"campaign {campaign_id} has no trial #{number}")
            if trial.state not in (d.TrialState.QUEUED, d.TrialState.RUNNING, d.TrialState.PAUSED):
                raise FailedPrecondition(
                    f"trial #{number} is {trial.state.value}; only a QUEUED, RUNNING or PAUSED trial can be stopped",
                    [("state", f"{trial.state.value}, not QUEUED, RUNNING or PAUSED")],
                )
            # The lease stays, so a holder's next heartbeat learns of the stop.
            tx.trials.finish(trial.id, d.TrialState.CANCELLED, now, error=said)
            tx.trials.add_event(trial.id, trial.attempt, "cancelled", now, reason=said)
            current = tx.campaigns.get(campaign_id)
            assert current is not None
            if rules.campaign_done(current.state, current.trials_finished, current.max_trials):
                tx.campaigns.set_state(campaign_id, d.CampaignState.COMPLETED, now)
        with self.ctx.storage.read() as tx:
            stopped = tx.trials.get(trial.id, full=True)
        assert stopped is not None
        log.info("campaign %d: trial #%d stopped: %s", campaign_id, number, said)
        return stopped

    def pause(self, campaign_id: int, token: d.ApiToken | None = None) -> d.Campaign:
        """RUNNING -> PAUSED: agents get no new trial until :meth:`resume`."""
        return self._move(campaign_id, d.CampaignState.RUNNING, d.CampaignState.PAUSED, token)

    def resume(self, campaign_id: int, token: d.ApiToken | None = None) -> d.Campaign:
        """PAUSED -> RUNNING."""
        return self._move(campaign_id, d.CampaignState.PAUSED, d.CampaignState.RUNNING, token)

    def _move(
        self, campaign_id: int, source: d.CampaignState, target: d.CampaignState, token: d.ApiToken | None
    ) -> d.Campaign:
        require_id("campaign_id", campaign_id)
        with self.ctx.storage.write() as tx:
            campaign = campaign_or_404(tx, campaign_id, lock=True)
            verb = "paused" if target == d.CampaignState.PAUSED else "resumed"
            require_owner(campaign, token, "pause" if target == d.CampaignState.PAUSED else "resume")
            if campaign.pause_reason and campaign.pause_reason.startswith(IMPORTING):
                raise FailedPrecondition(
                    f"campaign {campaign_id} is being imported ({campaign.pause_reason}): it takes its state when "
                    "the import ends",
                    [("state", "importing")],
                )
            if campaign.state != source:
                raise FailedPrecondition(
                    f"campaign {campaign_id} is {campaign.state.value}; only a {source.value} campaign can be {verb}",
                    [("state", f"{campaign.state.value}, not {source.value}")],
                )
            tx.campaigns.set_state(campaign_id, target, None)
            paused = target == d.CampaignState.PAUSED
            tx.campaigns.set_pause_reason(campaign_id, f"paused by a user{_who(token)}" if paused else None)
            moved = tx.campaigns.get(campaign_id)
        assert moved is not None
        log.info("campaign %d: %s -> %s%s", campaign_id, source.value, target.value, _who(token))
        return moved

    def raise_budget(self, campaign_id: int, max_trials: int, token: d.ApiToken | None = None) -> d.Campaign:
        """``budget.max_trials`` raised to ``max_trials``; a COMPLETED campaign RUNNING
        again. InvalidArgument names ``max_trials`` if it is not above the budget or the
        spec refuses it (a grid's size, PBT's population)."""
        require_id("campaign_id", campaign_id)
        if isinstance(max_trials, bool) or not isinstance(max_trials, int):
            raise InvalidArgument("max_trials: must be an integer", [("max_trials", "an integer")])
        with self.ctx.storage.write() as tx:
            campaign = campaign_or_404(tx, campaign_id, lock=True)
            require_owner(campaign, token, "raise the budget of")
            if campaign.state == d.CampaignState.CANCELLED:
                raise FailedPrecondition(
                    f"campaign {campaign_id} is CANCELLED; a cancelled campaign's budget cannot be raised",
                    [("state", "CANCELLED")],
                )
            if max_trials <= campaign.max_trials:
                raise InvalidArgument(
                    f"max_trials: {max_trials} is not above the budget of {campaign.max_trials}; "
                    "a budget can only be raised",
                    [("max_trials", f"an integer above {campaign.max_trials}")],
                )
            spec = copy.deepcopy(campaign.spec)
            spec["budget"]["max_trials"] = max_trials
            try:
                spec = validate_spec(spec)
            except InvalidArgument as exc:  # named as the caller sent it
                errors = [("max_trials" if f == "budget.max_trials" else f, m) for f, m in exc.errors]
                raise InvalidArgument(f"max_trials: {max_trials} is refused: {exc}", errors) from None
            tx.campaigns.set_spec(campaign_id, spec)
            if campaign.state == d.CampaignState.COMPLETED:
                tx.campaigns.set_state(campaign_id, d.CampaignState.RUNNING, None)
            raised = tx.campaigns.get(campaign_id)
        assert raised is not None
        self.ctx.optimizers.forget(campaign_id)
        log.info(
            "campaign %d: budget raised from %d to %d trials%s%s",
            campaign_id,
            campaign.max_trials,
            max_trials,
            " (COMPLETED -> RUNNING)" if campaign.state == d.CampaignState.COMPLETED else "",
            _who(token),
        )
        return raised
