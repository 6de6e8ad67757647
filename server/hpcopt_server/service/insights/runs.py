"""What runs and ran: a trial's detail, the running trials with their latest report,
the timeline of attempts and the agents with their health."""

from __future__ import annotations

from datetime import timedelta

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, NotFound
from hpcopt_server.service.context import campaign_or_404, revisions
from hpcopt_server.service.insights.base import (
    MAX_SPANS,
    AgentView,
    InsightBase,
    RunningPage,
    TrialDetail,
    ran_by_trial,
)
from hpcopt_server.service.limits import require_id, require_range
from hpcopt_server.storage.views import Span


class Runs(InsightBase):
    def trial(self, trial_id: int | None = None, *, campaign_id: int = 0, number: int = -1) -> TrialDetail:
        """A trial with its events and curves, by global id or by its campaign-local
        number (what the dashboard and CLI show)."""
        with self.ctx.storage.read() as tx:
            if trial_id is None:
                require_range("number", number, 0)
                campaign_or_404(tx, campaign_id)
                trial_id = tx.views.trial_id_by_number(campaign_id, number)
                if trial_id is None:
                    raise NotFound(f"campaign {campaign_id} has no trial #{number}")
            require_id("trial_id", trial_id)
            trial = tx.trials.get(trial_id, full=True)
            if trial is None:
                raise NotFound(f"trial {trial_id} does not exist")
            agents = tx.agents.hosts([trial.agent_id, *(e.agent_id for e in trial.events)])
            ran = ran_by_trial(tx.views.spans(trial.campaign_id, [trial.id])).get(trial.id)
        return TrialDetail(trial, ran, agents)

    def fold_analyses(self, trial_id: int) -> list[d.FoldAnalysis]:
        """A trial's fold analyses (the spec's ``analysis``), by fold; NotFound for a
        trial that does not exist ([] for one with none)."""
        require_id("trial_id", trial_id)
        with self.ctx.storage.read() as tx:
            if tx.trials.get(trial_id, folds=False) is None:
                raise NotFound(f"trial {trial_id} does not exist")
            return tx.analyses.of_trial(trial_id)

    def running(self, campaign_id: int) -> RunningPage:
        """The RUNNING trials with their folds done and latest report, and their agents."""
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            rows = tx.views.running_detail(campaign_id)
            agents = tx.agents.hosts(r.trial.agent_id for r in rows)
            ran = ran_by_trial(tx.views.spans(campaign_id, [r.trial.id for r in rows]))
        epochs = int((campaign.spec.get("training") or {}).get("epochs") or 0)
        return RunningPage(rows, agents, campaign.folds, epochs, ran)

    def timeline(self, campaign_id: int, limit: int = 2000) -> tuple[list[Span], int, dict[str, tuple[str, str]]]:
        """The latest ``limit`` attempt spans (by start), how many there are in all, and
        the agents they ran on."""
        if not 1 <= limit <= MAX_SPANS:
            raise InvalidArgument(f"limit must be in 1..{MAX_SPANS}", [("limit", f"must be in 1..{MAX_SPANS}")])
        revision = revisions(self.ctx, campaign_id)[1]
        key = ("timeline", campaign_id, limit)
        return self.ctx.shared.get(key, revision, lambda: self._timeline(campaign_id, limit))[1]

    def _timeline(self, campaign_id: int, limit: int) -> tuple[list[Span], int, dict[str, tuple[str, str]]]:
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            spans = tx.views.spans(campaign_id)
            shown = spans[-limit:]
            agents = tx.agents.hosts(s.agent_id for s in shown)
        return shown, len(spans), agents

    def agents(self, campaign_id: int) -> list[AgentView]:
        now = self.ctx.clock()
        at_risk = timedelta(seconds=2 * self.ctx.settings.heartbeat_seconds)
        with self.ctx.storage.read() as tx:
            campaign_or_404(tx, campaign_id)
            agents = tx.agents.registered(campaign_id)
            running = tx.agents.running_in(campaign_id)
        out = []
        for a in agents:
            trial_id, expires = running.get(a.id, (None, None))
            silent = now - a.last_seen_at > at_risk
            gone = a.exited_at is not None or (silent and trial_id is None)
            out.append(AgentView(a, trial_id, expires, trial_id is not None and silent, gone))
        return out
