"""The agent calls' fast paths: the common case in a few statements, without waiting on
other trials.

Each method answers the ordinary call (the lease holds, the fold is open, the budget
allows) in one short transaction of lean statements (``storage/hot.py``) and returns
``None`` for anything else: then :class:`~hpcopt_server.service.agents.AgentService`
runs its full path, which finds and names the reason (expired lease, finished fold,
wrong token, replayed report, requeued trial to resume). A fast path that gives up rolls
back what it did, so the full path starts from the same state.

What makes heartbeats and reports independent of acquisitions and completions:

- they lock only their own trial row, never the campaign row; a pruning decision is
  read from committed data without the campaign lock, and only a trial actually pruned
  takes it, in a second transaction that checks the lease again;
- acquisitions of one campaign queue on an in-process gate *before* they open a
  transaction, so waiting for the campaign lock holds no database connection (the pool
  stays free for heartbeats) and only one connection per server process waits on the
  row lock; the thread at the gate serves every waiting acquisition in one transaction
  (``batch.py``);
- completions read and check everything first and take the campaign row lock last
  (counter bump, guarded trial update, event, commit): held for three statements and
  the commit.

Per-process caches hold only what never changes: which token registered an agent, and
campaign specs.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TypeVar

from hpcopt_server import domain as d
from hpcopt_server.pruners import Verdict
from hpcopt_server.service.batch import AcquireBatcher
from hpcopt_server.service.context import Context, bound_curve
from hpcopt_server.service.leasing import Acquisition, Action, HeartbeatReply, Lease
from hpcopt_server.service.pruning import SqlHistory, prune, pruner_of
from hpcopt_server.storage.repository import Tx

R = TypeVar("R")
_MAX_CACHED = 200_000


class _GiveUp(Exception):
    """Roll the fast path back; the full path answers."""


_UNKNOWN = object()


class HotPath:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._agents: dict[str, int | None] = {}
        self._campaigns: dict[int, d.Campaign] = {}
        self._gates: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()
        self.batcher = AcquireBatcher(self)

    # -- shared ----------------------------------------------------------------------

    def run(self, body: Callable[[Tx], R]) -> R | None:
        try:
            with self.ctx.storage.write() as tx:
                return body(tx)
        except _GiveUp:
            return None

    def _check_agent(self, tx: Tx, agent_id: str, caller: int | None) -> None:
        """Gives up unless the agent is registered by the caller's token (with auth on)."""
        token = self._agents.get(agent_id, _UNKNOWN)
        if token is _UNKNOWN:
            known, token = tx.agent_token(agent_id)
            if not known:
                raise _GiveUp
            with self._lock:
                if len(self._agents) >= _MAX_CACHED:
                    self._agents.clear()
                self._agents[agent_id] = token
        if caller is not None and token != caller:
            raise _GiveUp

    def campaign(self, tx: Tx, campaign_id: int) -> d.Campaign:
        """The campaign as created (spec, id); its counters and state are not kept fresh."""
        c = self._campaigns.get(campaign_id)
        if c is None:
            c = tx.get_campaign(campaign_id)
            if c is None:
                raise _GiveUp
            with self._lock:
                if len(self._campaigns) >= _MAX_CACHED:
                    self._campaigns.clear()
                self._campaigns[campaign_id] = c
        return c

    def owns(self, tx: Tx, agent_id: str, caller: int | None) -> bool:
        """The agent is registered, by the caller's token with auth on."""
        try:
            self._check_agent(tx, agent_id, caller)
        except _GiveUp:
            return False
        return True

    @contextmanager
    def gate(self, campaign_id: int) -> Iterator[None]:
        """Serializes this process's campaign-locking calls of one campaign before they
        take a database connection."""
        with self._lock:
            gate = self._gates.setdefault(campaign_id, threading.Lock())
        with gate:
            yield

    def expiry(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.ctx.settings.lease_seconds)

    # -- while a trial runs ------------------------------------------------------------

    def _known(self, agent_id: str, caller: int | None) -> bool:
        """The agent is in the cache and belongs to the caller's token."""
        token = self._agents.get(agent_id, _UNKNOWN)
        return token is not _UNKNOWN and (caller is None or token == caller)

    def heartbeat(self, lease: Lease, caller: int | None) -> HeartbeatReply | None:
        now = self.ctx.clock()
        expires = self.expiry(now)
        if self._known(lease.agent_id, caller):
            with self.ctx.storage.one_statement() as one:
                if one is not None:
                    held = one.heartbeat(lease.trial_id, lease.agent_id, lease.lease_id, now, expires)
                    return HeartbeatReply(Action.CONTINUE, expires) if held else None

        def body(tx: Tx) -> HeartbeatReply:
            self._check_agent(tx, lease.agent_id, caller)
            if tx.renew_lease(lease.trial_id, lease.agent_id, lease.lease_id, now, expires) is None:
                raise _GiveUp
            tx.seen_agent(lease.agent_id, now)
            return HeartbeatReply(Action.CONTINUE, expires)

        return self.run(body)

    def report_intermediate(
        self, lease: Lease, fold: int, step: int, value: float, checkpoint_uri: str, caller: int | None
    ) -> HeartbeatReply | None:
        now = self.ctx.clock()
        expires = self.expiry(now)
        if fold < 0:
            return None
        campaign: d.Campaign | None
        if self._known(lease.agent_id, caller) and self.ctx.storage.dialect == "postgresql":
            with self.ctx.storage.one_statement() as one:
                assert one is not None
                done = one.report(lease.trial_id, lease.agent_id, lease.lease_id, now, expires, fold=fold,
                                  step=step, value=value, checkpoint_uri=checkpoint_uri)  # fmt: skip
            # Refused (lease, fold): the full path names why; a transaction would refuse too.
            found = None if done is None else (self._cached_campaign(done[0]), done[2])
        else:
            args = (lease, fold, step, value, checkpoint_uri, caller, now, expires)
            found = self.run(lambda tx: self._report_in_tx(tx, *args))
        if found is None:
            return None
        campaign, points = found
        bound_curve(self.ctx, campaign, lease.trial_id, fold, points)
        pruner = pruner_of(campaign)
        if pruner is not None and self._pruned(lease, campaign, lambda h, t: pruner.at_step(h, t, fold, step, value)):
            return HeartbeatReply(Action.STOP_PRUNED, None)
        return HeartbeatReply(Action.CONTINUE, expires)

    def _report_in_tx(self, tx: Tx, lease: Lease, fold: int, step: int, value: float, checkpoint_uri: str,
                      caller: int | None, now: datetime, expires: datetime) -> tuple[d.Campaign, int]:  # fmt: skip
        self._check_agent(tx, lease.agent_id, caller)
        renewed = tx.renew_lease(lease.trial_id, lease.agent_id, lease.lease_id, now, expires)
        if renewed is None:
            raise _GiveUp
        campaign = self.campaign(tx, renewed[0])
        if fold >= campaign.folds or not tx.open_fold(lease.trial_id, fold, renewed[1], now, checkpoint_uri):
            raise _GiveUp
        return campaign, tx.set_curve_point(lease.trial_id, fold, step, value)

    def report_fold(
        self, lease: Lease, fold: int, value: float, metrics: dict[str, float], checkpoint_uri: str, caller: int | None
    ) -> d.Fold | None:
        now = self.ctx.clock()
        expires = self.expiry(now)
        if fold < 0:
            return None
        done: tuple[d.Campaign, d.Fold] | None = None
        if self._known(lease.agent_id, caller):
            with self.ctx.storage.one_statement() as one:
                found = None if one is None else one.fold(
                    lease.trial_id, lease.agent_id, lease.lease_id, now, expires, fold=fold, value=value,
                    metrics=metrics, checkpoint_uri=checkpoint_uri,
                )  # fmt: skip
            if found is not None:
                done = self._cached_campaign(found[0]), found[1]
        if done is None:
            done = self.run(lambda tx: self._fold_in_tx(tx, lease, fold, value, metrics, checkpoint_uri, caller, now))
        if done is None:
            return None
        campaign, result = done
        pruner = pruner_of(campaign)
        if pruner is not None:
            self._pruned(
                lease,
                campaign,
                lambda h, t: pruner.at_fold(h, t) if sum(f.finished for f in t.folds) < campaign.folds else None,
            )
        return result

    def _fold_in_tx(self, tx: Tx, lease: Lease, fold: int, value: float, metrics: dict[str, float],
                    checkpoint_uri: str, caller: int | None, now: datetime) -> tuple[d.Campaign, d.Fold]:  # fmt: skip
        self._check_agent(tx, lease.agent_id, caller)
        renewed = tx.renew_lease(lease.trial_id, lease.agent_id, lease.lease_id, now, self.expiry(now))
        if renewed is None:
            raise _GiveUp
        campaign = self.campaign(tx, renewed[0])
        if fold >= campaign.folds or any(m not in metrics for m, _ in campaign.objectives[1:]):
            raise _GiveUp
        kept = tx.close_fold(lease.trial_id, fold, renewed[1], now, value, metrics, checkpoint_uri)
        if kept is None:
            raise _GiveUp  # finished already: a replay, or a conflict the full path names
        return campaign, d.Fold(fold, True, value, dict(metrics), kept, renewed[1])

    def _cached_campaign(self, campaign_id: int) -> d.Campaign:
        if campaign_id not in self._campaigns:
            with self.ctx.storage.read() as tx:
                return self.campaign(tx, campaign_id)
        return self._campaigns[campaign_id]

    def _pruned(
        self, lease: Lease, campaign: d.Campaign, decide: Callable[[SqlHistory, d.Trial], Verdict | None]
    ) -> bool:
        """Asks the pruner on committed data; a trial it stops is pruned under the
        campaign lock if this lease still holds it then."""
        with self.ctx.storage.read() as tx:
            trial = tx.get_trial(lease.trial_id)
            if trial is None or trial.state != d.TrialState.RUNNING:
                return False
            verdict = decide(SqlHistory(tx, campaign.id), trial)
        if verdict is None:
            return False
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            locked = tx.lock_campaign(campaign.id)
            trial = tx.get_trial(lease.trial_id, lock=True)
            if locked is None or trial is None or trial.state != d.TrialState.RUNNING:
                return False
            if trial.lease_id != lease.lease_id:
                return False
            prune(tx, locked, trial, verdict, now)
        return True

    # -- the ends of an attempt --------------------------------------------------------

    def acquire(self, agent_id: str, campaign_id: int, caller: int | None) -> Acquisition | None:
        """A new trial for the agent, served with the other acquisitions of the campaign
        waiting in this process (:mod:`~hpcopt_server.service.batch`). A trial to resume, or
        an unknown agent, goes to the full path."""
        return self.batcher.acquire(agent_id, campaign_id, caller)

    def complete(self, lease: Lease, caller: int | None) -> d.Trial | None:
        now = self.ctx.clock()

        def body(tx: Tx) -> d.Trial:
            self._check_agent(tx, lease.agent_id, caller)
            trial = tx.trial_with_folds(lease.trial_id)
            if trial is None or trial.state != d.TrialState.RUNNING or trial.lease_id != lease.lease_id:
                raise _GiveUp
            campaign = self.campaign(tx, trial.campaign_id)
            finished = {f.index: f for f in trial.folds if f.finished and f.value is not None}
            if any(k not in finished for k in range(campaign.folds)):
                raise _GiveUp
            values = [float(finished[k].value) for k in range(campaign.folds)]  # type: ignore[arg-type]
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            means = None
            if len(campaign.objectives) > 1:
                if any(m not in finished[k].metrics for m, _ in campaign.objectives[1:] for k in finished):
                    raise _GiveUp
                means = [mean] + [
                    statistics.fmean(finished[k].metrics[m] for k in range(campaign.folds))
                    for m, _ in campaign.objectives[1:]
                ]
            # Campaign, then trial: the lock order of every writer. The campaign's lock is
            # held from here to the commit (three statements and the commit).
            counted = tx.count_finished(campaign.id)
            if counted is None:
                raise _GiveUp
            seq, state = counted
            if not tx.complete_leased(trial.id, lease.agent_id, lease.lease_id, now, seq=seq, value=mean,
                                      value_std=std, values=means):  # fmt: skip
                raise _GiveUp
            tx.log_event(trial.id, trial.attempt, "completed", now, lease.agent_id)
            if state == d.CampaignState.RUNNING and seq >= campaign.max_trials:
                tx.set_campaign_state(campaign.id, d.CampaignState.COMPLETED, now)
            return dataclasses.replace(
                trial, state=d.TrialState.COMPLETED, value=mean, value_std=std,
                values=None if means is None else tuple(means), finished_at=now, finish_seq=seq,
            )  # fmt: skip

        return self.run(body)
