"""The calls that end an attempt: complete, release (FAILED, PRUNED, PREEMPTED), the
server's prune, an expired lease, an agent that exits."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from hpcopt.core import constraints
from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.failures import digest
from hpcopt_server.rules import Refusal
from hpcopt_server.storage import agent_sql as S
from hpcopt_server.storage.agent_calls.base import (
    CallsBase,
    HeldLease,
    Refused,
    Rollback,
    event_params,
    holds,
    lease_params,
    log,
)
from hpcopt_server.storage.repository import Tx


class Ending(CallsBase):
    def complete(self, lease: HeldLease, now: datetime) -> d.Trial | Refused:
        """RUNNING -> COMPLETED with the mean and spread of its folds (rules.fold_summary);
        completing again under the same lease answers with the completed trial."""
        try:
            if self.one_statement:
                try:
                    return self._complete_one(lease, now)
                except _Transaction:
                    pass
            return self._complete_tx(lease, now)
        except Rollback:
            pass
        trial, campaign = self._read(lease.trial_id)
        done = (d.TrialState.COMPLETED, d.TrialState.PAUSED)
        if trial is not None and trial.state in done and holds(trial, lease):
            return trial  # a retry whose first reply was lost
        why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
        if why is not None or trial is None or campaign is None:
            return Refused(why or Refusal.NO_CAMPAIGN, trial)
        summary = rules.fold_summary(
            trial.folds, _fold_count(trial, campaign), campaign.objectives, campaign.constraints
        )
        if not isinstance(summary, rules.FoldSummary):
            return Refused(Refusal.FOLDS_MISSING, trial, tuple(summary))
        return Refused(Refusal.CHANGED, trial)

    def _summary(
        self, trial: d.Trial | None, campaign: d.Campaign | None, lease: HeldLease, now: datetime
    ) -> rules.FoldSummary:
        if trial is None or campaign is None or rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now):
            raise Rollback
        summary = rules.fold_summary(
            trial.folds, _fold_count(trial, campaign), campaign.objectives, campaign.constraints
        )
        if not isinstance(summary, rules.FoldSummary):
            raise Rollback
        return summary

    def _complete_one(self, lease: HeldLease, now: datetime) -> d.Trial:
        """PostgreSQL: an unlocked read of the folds, then the completion in one statement
        (``agent_sql.PG_COMPLETE``): the campaign's lock is held for that statement only."""
        with self.storage.db.autocommit() as c:
            trial = self._trial_with_folds(c, lease.trial_id)
            campaign = None if trial is None else self.campaign(trial.campaign_id, c)
            summary = self._summary(trial, campaign, lease, now)
            assert trial is not None and campaign is not None
            if trial.fidelity is not None:  # its rung is written with it, in a transaction
                raise _Transaction
            p = {
                **lease_params(lease, now, now),
                "cid": campaign.id,
                "value": summary.value,
                "std": summary.std,
                "values": summary.values,
                **summary.constraint_columns(),
            }
            seq = self.storage.finishing.complete_alone(c, p)
        if seq is None:
            raise Rollback
        return _completed(trial, summary, now, seq)

    def _complete_tx(self, lease: HeldLease, now: datetime) -> d.Trial:
        p = lease_params(lease, now, now)
        with self.storage.write() as tx:
            c = tx.connection()
            trial = self._trial_with_folds(c, lease.trial_id)
            campaign = None if trial is None else self.campaign(trial.campaign_id, c)
            summary = self._summary(trial, campaign, lease, now)
            assert trial is not None and campaign is not None
            # The campaign's lock is held from here to the commit.
            fidelity = None
            if trial.fidelity is not None:
                rung = _rung_result(trial, trial.fidelity, summary)
                fidelity = replace(trial.fidelity, history=(*trial.fidelity.history, rung))
                if not campaign.full_fidelity(trial.fidelity):
                    return self._pause(tx, campaign, trial, fidelity, summary, lease, now)
            done = {
                "cid": campaign.id,
                "now2": now,
                "value": summary.value,
                "std": summary.std,
                "values": summary.values,
                **summary.constraint_columns(),
            }
            taken = self.storage.finishing.complete(c, {**p, **done})
            if taken is None:
                raise Rollback
            seq, state, max_trials = taken
            if fidelity is not None:  # the top rung: its history ends with it
                tx.fidelity.record(trial.id, fidelity)
                trial = replace(trial, fidelity=fidelity)
            c.execute(S.EVENT, event_params(trial.id, trial.attempt, "completed", lease.agent_id, now))
            if rules.campaign_done(d.CampaignState(state), seq, max_trials):
                tx.campaigns.set_state(campaign.id, d.CampaignState.COMPLETED, now)
            return _completed(trial, summary, now, seq)

    def _pause(
        self,
        tx: Tx,
        campaign: d.Campaign,
        trial: d.Trial,
        fidelity: d.Fidelity,
        summary: rules.FoldSummary,
        lease: HeldLease,
        now: datetime,
    ) -> d.Trial:
        """A multi-fidelity trial's rung below the top, done: PAUSED with the rung's
        value, for its campaign's searcher to promote or stop. It takes no finish number:
        the configuration is not finished."""
        tx.campaigns.lock(campaign.id)
        current = tx.trials.get(trial.id, lock=True, folds=False)
        if current is None or current.state != d.TrialState.RUNNING or not holds(current, lease):
            raise Rollback  # the lease ended meanwhile
        tx.fidelity.pause(trial.id, fidelity, summary.value, summary.std, summary.values)
        rung = fidelity.history[-1]
        of = f"{rung.folds} of {campaign.folds} folds, {rung.epochs} epochs"
        why = f"finished rung {rung.rung} ({of}): {rung.value:.6g}"
        tx.trials.add_event(trial.id, trial.attempt, "paused", now, agent_id=lease.agent_id, reason=why)
        out = tx.trials.get(trial.id)
        assert out is not None
        return out

    def release(self, lease: HeldLease, state: d.TrialState, reason: str, now: datetime) -> d.Trial | Refused:
        """FAILED or PRUNED (final), or PREEMPTED: back to the queue as attempt + 1."""
        with self.storage.write() as tx:
            campaign, trial = self._lock_trial(tx, lease.trial_id)
            why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
            if trial is None or campaign is None or why is not None:
                return Refused(why or Refusal.NO_CAMPAIGN, trial)
            tx.trials.add_event(
                trial.id, trial.attempt, state.value.lower(), now, agent_id=lease.agent_id, reason=reason
            )
            if state == d.TrialState.PREEMPTED:
                self._requeue(tx, campaign, trial, now, f"preempted: {reason}" if reason else "preempted")
            elif state == d.TrialState.PRUNED:
                # Pruned by its agent: the value it reached is its latest learning-curve
                # point (as the server's pruners store theirs), and the reason is kept.
                points = tx.results.curves_of([trial.id], None)[trial.id]
                last = max(points, key=lambda p: (p.fold, p.step)) if points else None
                others: list[float] = []
                if last is not None:
                    done = (d.TrialState.COMPLETED,)
                    at = tx.results.values_at(campaign.id, last.fold, last.step, done)
                    others = [v for i, v in at.items() if i != trial.id]
                said = self.wording.pruned_by_agent(reason, last, others)
                tx.trials.finish(trial.id, state, now, value=last.value if last else None, error=said)
            else:
                failure = digest(reason or "failed (no reason given)")
                ran_out = constraints.exhausted(reason, campaign.constraints)
                if ran_out:
                    # Infeasible for the resource it exhausted: an outcome the search
                    # learns from, not a failure that repeats (no signature, no pause).
                    o = constraints.exhausted_outcome(campaign.constraints, ran_out, "ran out: " + failure.summary)
                    tx.trials.finish(trial.id, state, now, error=failure.summary, outcome=o)
                else:
                    tx.trials.finish(trial.id, state, now, error=failure.summary, failure=failure.signature)
                    self._pause_if_repeating(tx, campaign, failure.signature, now)
            self._finish_campaign_if_done(tx, campaign.id, now)
            out = tx.trials.get(trial.id)
        assert out is not None
        return out

    def prune(self, lease: HeldLease, value: float, reason: str, now: datetime) -> bool:
        """RUNNING -> PRUNED with the value it reached, if ``lease`` still holds it."""
        with self.storage.write() as tx:
            campaign, trial = self._lock_trial(tx, lease.trial_id)
            if campaign is None or trial is None or trial.state != d.TrialState.RUNNING or not holds(trial, lease):
                return False
            tx.trials.finish(trial.id, d.TrialState.PRUNED, now, value=value, error=reason)
            tx.trials.add_event(trial.id, trial.attempt, "pruned", now, agent_id=trial.agent_id, reason=reason)
            self._finish_campaign_if_done(tx, campaign.id, now)
        return True

    def expire(self, trial_id: int, now: datetime) -> d.Trial | None:
        """Requeues (or fails, after its last attempt) a RUNNING trial whose lease ended
        before ``now``; the trial as it was, or None if it was renewed or finished meanwhile."""
        with self.storage.write() as tx:
            campaign, trial = self._lock_trial(tx, trial_id)
            if campaign is None or trial is None or trial.state != d.TrialState.RUNNING:
                return None
            if trial.lease_expires_at is None or trial.lease_expires_at >= now:
                return None  # renewed meanwhile
            why = f"lease expired at {trial.lease_expires_at.isoformat()} (agent {trial.agent_id})"
            tx.trials.add_event(trial.id, trial.attempt, "lease_expired", now, agent_id=trial.agent_id, reason=why)
            self._requeue(tx, campaign, trial, now, "lease expired")
            self._finish_campaign_if_done(tx, campaign.id, now)
        return trial

    def deregister(self, agent_id: str, now: datetime, reason: str = "") -> list[int]:
        """Ends an agent's registration, saying why if ``reason``; the trials it still
        held are requeued (ids)."""
        requeued = []
        with self.storage.write() as tx:
            for tid in tx.agents.holding(agent_id):
                campaign, trial = self._lock_trial(tx, tid)
                if campaign is None or trial is None or trial.state != d.TrialState.RUNNING:
                    continue
                if trial.agent_id != agent_id:
                    continue
                tx.trials.add_event(
                    tid, trial.attempt, "lease_expired", now, agent_id=agent_id, reason="the agent exited"
                )
                self._requeue(tx, campaign, trial, now, "its agent exited")
                requeued.append(tid)
            tx.agents.end(agent_id, now, reason)
        return requeued

    def _pause_if_repeating(self, tx: Tx, campaign: d.Campaign, signature: str, now: datetime) -> None:
        """Pauses a RUNNING campaign whose last ``pause_after_failures`` finished trials were
        all failed by their agents with ``signature`` (the one that just failed among them),
        saying why."""
        n = campaign.pause_after_failures
        if n <= 0:
            return
        last = tx.results.last_finished(campaign.id, n)
        if len(last) < n or any(state != d.TrialState.FAILED or failure != signature for state, failure in last):
            return
        current = tx.campaigns.get(campaign.id)
        if current is None or current.state != d.CampaignState.RUNNING:
            return
        why = self.wording.paused_for_failures(campaign.id, n, signature, now)
        tx.campaigns.set_state(campaign.id, d.CampaignState.PAUSED, None)
        tx.campaigns.set_pause_reason(campaign.id, why)
        log.warning("campaign %d paused: %s", campaign.id, why)


class _Transaction(Exception):
    """A completion that needs the transaction path (a multi-fidelity trial's rung)."""


def _fold_count(trial: d.Trial, campaign: d.Campaign) -> int:
    """The folds a completion needs: the unit's (multi-fidelity), else all K."""
    return campaign.folds if trial.fidelity is None else trial.fidelity.folds


def _rung_result(trial: d.Trial, fidelity: d.Fidelity, summary: rules.FoldSummary) -> d.RungResult:
    """The rung a completion finishes: each fold's value, and the seconds the folds had
    trained in all (their ``train_seconds``, resumes included)."""
    folds = {f.index: f for f in trial.folds}
    values = tuple(float(folds[k].value or 0.0) for k in range(fidelity.folds))
    seconds = sum(float(folds[k].metrics.get("train_seconds", 0.0)) for k in range(fidelity.folds))
    return d.RungResult(fidelity.rung, fidelity.folds, fidelity.epochs, summary.value, values, seconds)


def _completed(trial: d.Trial, summary: rules.FoldSummary, now: datetime, seq: int) -> d.Trial:
    values = None if summary.values is None else tuple(summary.values)
    return replace(
        trial,
        state=d.TrialState.COMPLETED,
        value=summary.value,
        value_std=summary.std,
        values=values,
        finished_at=now,
        finish_seq=seq,
        constraint_values=None if summary.outcome is None else summary.outcome.values,
        violation=None if summary.outcome is None else summary.outcome.violation,
        broken="" if summary.outcome is None else summary.outcome.broken,
    )
