"""Analyses of finished trials, asked for after the fact: a user with the ``submit``
scope asks for the curvature and landscape of a COMPLETED trial (REST ``POST
/trials/{id}/analysis``, gRPC ``RequestAnalysis``, ``hpcopt analyse``); the request is
QUEUED in SQL; the campaign's next agent takes it at a trial boundary (or, on a finished
campaign, before it leaves) under a lease, computes each fold's analysis from the fold's
last checkpoint on its own ranks, stores the documents (``ReportAnalysis`` under that
lease) and ends it DONE or FAILED.

- **What can be asked**: a COMPLETED trial of a campaign with an ``analysis`` section
  (its options and bounds are the ones used), every fold of which kept a checkpoint.
  Anything else is refused with FailedPrecondition saying which.
- **Asking again** for a request that is QUEUED or RUNNING answers it unchanged; for
  one that ended, queues it afresh.
- **The lease** is :data:`LEASE_SECONDS` long with no heartbeat: an analysis is bounded
  to a few percent of a trial, and one whose agent died is taken again after it.
- **What it has**: the final weights' eigenvalues, density and surfaces; not the λ_max
  trace or the trajectory, which need each epoch's weights (only a fold-end analysis
  has those in memory).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, NotFound
from hpcopt_server.service import limits as lim
from hpcopt_server.service.agent_messages import Lease
from hpcopt_server.service.agents import AgentService
from hpcopt_server.service.context import Context, campaign_or_404
from hpcopt_server.storage.analyses import QUEUED, RUNNING

#: How long an agent holds a requested analysis.
LEASE_SECONDS = 3600


class RequestedAnalyses:
    def __init__(self, ctx: Context, agents: AgentService) -> None:
        self.ctx = ctx
        self.agents = agents

    def request(self, trial_id: int) -> d.AnalysisRequest:
        """Queues an analysis of a COMPLETED trial (see the module's docstring)."""
        lim.require_id("trial_id", trial_id)
        with self.ctx.storage.write() as tx:
            trial = tx.trials.get(trial_id)
            if trial is None:
                raise NotFound(f"trial {trial_id} does not exist")
            campaign = campaign_or_404(tx, trial.campaign_id)
            if not campaign.spec.get("analysis"):
                raise FailedPrecondition(
                    f"campaign {campaign.id} has no analysis section: the agents know no options to compute one "
                    "with (submit the campaign with `analysis: {hessian: {}}` and analyse its trials)"
                )
            if trial.state != d.TrialState.COMPLETED:
                raise FailedPrecondition(
                    f"trial {trial_id} is {trial.state.value}: an analysis is asked of a COMPLETED trial (a running "
                    "one's folds are analysed at their ends under analysis.on)"
                )
            kept = {f.index for f in trial.folds if f.finished and f.checkpoint_uri}
            missing = sorted(set(range(campaign.folds)) - kept)
            if missing:
                raise FailedPrecondition(
                    f"trial {trial_id}: fold(s) {missing} kept no checkpoint to analyse (checkpoint_every: 0 keeps "
                    "none, and a multi-fidelity trial stopped early trained fewer folds)"
                )
            current = tx.analyses.request_of(trial_id)
            if current is not None and current.state in (QUEUED, RUNNING):
                return current
            return tx.analyses.request(trial_id, campaign.id, self.ctx.clock())

    def of(self, trial_id: int) -> d.AnalysisRequest | None:
        """The trial's latest requested analysis (None: none asked); NotFound for no trial."""
        lim.require_id("trial_id", trial_id)
        with self.ctx.storage.read() as tx:
            if tx.trials.get(trial_id, folds=False) is None:
                raise NotFound(f"trial {trial_id} does not exist")
            return tx.analyses.request_of(trial_id)

    def take(self, agent_id: str, campaign_id: int, *, caller: int | None = None) -> tuple[d.Trial, str] | None:
        """The campaign's oldest requested analysis, leased to the agent: (the trial
        with its folds, the lease id); None when there is none."""
        lim.require_id("campaign_id", campaign_id)
        self.agents.check_agent(agent_id, caller)
        lease_id, now = uuid.uuid4().hex, self.ctx.clock()
        with self.ctx.storage.write() as tx:
            trial_id = tx.analyses.take(campaign_id, agent_id, lease_id, now, now + timedelta(seconds=LEASE_SECONDS))
            trial = None if trial_id is None else tx.trials.get(trial_id)
        return None if trial is None else (trial, lease_id)

    def finish(self, lease: Lease, error: str, summary: str, *, caller: int | None = None) -> None:
        """Ends the held analysis, DONE or FAILED with ``error``, and keeps what it cost
        (or why it failed) in the trial's event log; FailedPrecondition when the lease
        does not hold it."""
        lim.require_safe_text("error", error, lim.MAX_EXIT_REASON)
        lim.require_safe_text("summary", summary, lim.MAX_EXIT_REASON)
        self.agents.check_agent(lease.agent_id, caller)
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            if not tx.analyses.end(lease.trial_id, lease.agent_id, lease.lease_id, now, error):
                raise FailedPrecondition(
                    f"the analysis of trial {lease.trial_id} is not held by agent {lease.agent_id} under lease "
                    f"{lease.lease_id!r}: it expired and was taken again, or was asked for again"
                )
            trial = tx.trials.get(lease.trial_id, folds=False)
            if trial is not None:
                said = f"requested analysis failed: {error}" if error else f"requested analysis: {summary}"
                tx.trials.add_event(trial.id, trial.attempt, "analysis", now, agent_id=lease.agent_id, reason=said)
