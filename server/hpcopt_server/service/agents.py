"""Agent use cases: register, acquire under a lease, heartbeat, report, complete, release.

Every report names its lease (agent id, trial id, lease id). A report whose lease is not
the trial's current one, or has expired, is refused with FailedPrecondition and changes
nothing: the trial may already be running elsewhere.

With auth on, an agent id belongs to the token that registered it: a call naming that
agent with any other token is refused with PermissionDenied (agent ids are visible to
read tokens at ``/agents``, so they are not secrets). ``caller`` is the presented
token's id, None with auth off.

Retries are safe: ``report_fold`` with the same lease and the same content as a
finished fold, and ``complete`` of a trial this lease already completed, answer as the
first call did and change nothing, so an agent whose reply was lost can call again.
"""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import datetime, timedelta

from hpcopt.checkpoints import CheckpointRefused, check_reported
from hpcopt.documents import clip
from hpcopt_server import domain as d
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from hpcopt_server.pruners import Pruner
from hpcopt_server.service import limits as lim
from hpcopt_server.service.context import Context, bound_curve, campaign_or_404, finish_campaign_if_done
from hpcopt_server.service.hot import HotPath
from hpcopt_server.service.leasing import (
    AcquireStatus,
    Acquisition,
    Action,
    HeartbeatReply,
    Lease,
    Registration,
)
from hpcopt_server.service.pruning import SqlHistory, prune, pruner_of
from hpcopt_server.storage.repository import Tx

RELEASE_STATES = (d.TrialState.FAILED, d.TrialState.PREEMPTED, d.TrialState.PRUNED)
#: Event kinds an agent may add to a trial's log (ReportEvent), and how many of each one
#: attempt may hold: a fold group reports a refused checkpoint once per fold it starts.
AGENT_EVENTS = ("checkpoint_refused",)
MAX_AGENT_EVENTS = 100

__all__ = [
    "AcquireStatus",
    "Acquisition",
    "Action",
    "AgentService",
    "HeartbeatReply",
    "Lease",
    "Registration",
    "requeue",
]


class AgentService:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        # The lean paths need RETURNING; an older SQLite (before 3.35) takes the full
        # path for every call, which answers the same, only slower.
        self.hot = HotPath(ctx) if ctx.storage.returning else None
        self._server_id = ""

    def server_id(self) -> str:
        """This database's identity (stored on first use; replicas share it)."""
        if not self._server_id:
            with self.ctx.storage.write() as tx:
                self._server_id = tx.ensure_flag("server_id", uuid.uuid4().hex, self.ctx.clock())
        return self._server_id

    def _check_checkpoint(self, uri: str, lease: Lease, fold: int) -> None:
        lim.require_text("checkpoint_uri", uri, lim.MAX_URI)
        try:
            check_reported(uri, self.server_id(), lease.trial_id, fold)
        except CheckpointRefused as exc:
            raise InvalidArgument(f"checkpoint_uri: {exc}", [("checkpoint_uri", str(exc))]) from None

    # -- registration and acquisition -------------------------------------------------

    def register(
        self,
        *,
        host: str,
        ranks: int,
        gpus: int,
        slurm_job_id: str = "",
        campaign_id: int | None = None,
        pid: int = 0,
        version: str = "",
        caller: int | None = None,
    ) -> Registration:
        lim.require_range("ranks", ranks, 1)
        lim.require_range("gpus", gpus, 0)
        lim.require_range("pid", pid, 0)
        lim.require_safe_text("host", host, lim.MAX_HOST)
        lim.require_safe_text("slurm_job_id", slurm_job_id, lim.MAX_SHORT)
        lim.require_safe_text("version", version, lim.MAX_SHORT)
        if campaign_id:
            lim.require_id("campaign_id", campaign_id)
        now = self.ctx.clock()
        agent = d.Agent(
            id=uuid.uuid4().hex,
            host=host or "unknown",
            ranks=ranks,
            gpus=gpus,
            slurm_job_id=slurm_job_id,
            campaign_id=campaign_id or None,
            pid=pid,
            version=version,
            registered_at=now,
            last_seen_at=now,
            token_id=caller,
        )
        spec = None
        with self.ctx.storage.write() as tx:
            if campaign_id:
                spec = campaign_or_404(tx, campaign_id).spec
            tx.insert_agent(agent)
        s = self.ctx.settings
        return Registration(agent.id, s.lease_seconds, s.heartbeat_seconds, spec, self.server_id())

    def acquire(self, agent_id: str, campaign_id: int, *, caller: int | None = None) -> Acquisition:
        """Hands the agent one trial of the campaign under a new lease.

        A QUEUED trial (one that was preempted or lost its lease) goes first, so it
        resumes before new work starts; otherwise the optimizer suggests a new trial
        while the budget allows. The campaign row lock makes the budget exact across
        threads and server replicas.
        """
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        lim.require_id("campaign_id", campaign_id)
        t0 = time.perf_counter()
        fast = self.hot.acquire(agent_id, campaign_id, caller) if self.hot else None
        if fast is not None:
            self.ctx.observe_acquire(time.perf_counter() - t0)
            return fast
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, agent_id, caller)
            campaign = campaign_or_404(tx, campaign_id, lock=True)
            result = self._acquire_locked(tx, agent_id, campaign, now)
            tx.touch_agent(agent_id, now)
        self.ctx.observe_acquire(time.perf_counter() - t0)
        return result

    def _acquire_locked(self, tx: Tx, agent_id: str, campaign: d.Campaign, now: datetime) -> Acquisition:
        wait = Acquisition(AcquireStatus.WAIT, retry_after_seconds=self.ctx.settings.wait_seconds)
        if campaign.state != d.CampaignState.RUNNING:
            return Acquisition(AcquireStatus.DONE)
        if tx.running_count(campaign.id) >= campaign.max_parallel:
            return wait
        trial = tx.claim_queued_trial(campaign.id)
        if trial is None:
            if campaign.trials_created >= campaign.max_trials:
                # Budget used; a running trial may still come back to the queue.
                return wait
            [params] = self.ctx.optimizers.suggest(tx, campaign, 1)
            number = tx.next_trial_number(campaign.id)
            trial = tx.insert_trial(campaign.id, number, campaign.in_space_order(params), d.TrialState.QUEUED, now)
        lease_id = uuid.uuid4().hex
        expires = now + timedelta(seconds=self.ctx.settings.lease_seconds)
        tx.update_trial(
            trial.id,
            state=d.TrialState.RUNNING,
            agent_id=agent_id,
            lease_id=lease_id,
            lease_expires_at=expires,
            started_at=trial.started_at or now,
            error="",
        )
        tx.add_event(trial.id, trial.attempt, "acquired", now, agent_id=agent_id)
        granted = tx.get_trial(trial.id)
        return Acquisition(
            AcquireStatus.GRANTED,
            trial=granted,
            lease_id=lease_id,
            lease_expires_at=expires,
            campaign_spec=campaign.spec,
        )

    def deregister(self, agent_id: str, *, caller: int | None = None) -> list[int]:
        """Ends an agent's registration (its normal exit). Trials it still holds go back
        to the queue as after a lost lease; their ids are returned. Saying goodbye twice
        is harmless."""
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        now = self.ctx.clock()
        requeued: list[int] = []
        with self.ctx.storage.write() as tx:
            self._agent(tx, agent_id, caller)
            for tid in tx.running_of_agent(agent_id):
                campaign = self._lock_campaign_of(tx, tid)
                trial = self._locked_trial(tx, tid, folds=False)
                if trial.state != d.TrialState.RUNNING or trial.agent_id != agent_id:
                    continue
                tx.add_event(tid, trial.attempt, "lease_expired", now, agent_id=agent_id, reason="the agent exited")
                requeue(tx, campaign, trial, now, why="its agent exited")
                requeued.append(tid)
            tx.end_agent(agent_id, now)
        return requeued

    # -- while the trial runs ----------------------------------------------------------

    def heartbeat(self, lease: Lease, *, caller: int | None = None) -> HeartbeatReply:
        fast = self.hot.heartbeat(lease, caller) if self.hot else None
        if fast is not None:
            return fast
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, lease.agent_id, caller)
            trial = self._leased(tx, lease, now, allow_stopped=True, folds=False)
            if trial.state == d.TrialState.CANCELLED:
                return HeartbeatReply(Action.STOP_CANCELLED, None)
            if trial.state == d.TrialState.PRUNED:
                return HeartbeatReply(Action.STOP_PRUNED, None)
            expires = self._renew(tx, lease, now)
            tx.touch_agent(lease.agent_id, now)
        return HeartbeatReply(Action.CONTINUE, expires)

    def report_intermediate(
        self,
        lease: Lease,
        fold: int,
        step: int,
        value: float,
        checkpoint_uri: str = "",
        *,
        caller: int | None = None,
    ) -> HeartbeatReply:
        value = lim.require_finite("value", value)
        lim.require_range("step", step, 0)
        self._check_checkpoint(checkpoint_uri, lease, fold)
        fast = self.hot.report_intermediate(lease, fold, step, value, checkpoint_uri, caller) if self.hot else None
        if fast is not None:
            return fast
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, lease.agent_id, caller)
            campaign, pruner = self._campaign_and_pruner(tx, lease.trial_id)
            trial = self._leased(tx, lease, now, allow_stopped=True)
            if trial.state != d.TrialState.RUNNING:
                action = Action.STOP_CANCELLED if trial.state == d.TrialState.CANCELLED else Action.STOP_PRUNED
                return HeartbeatReply(action, None)
            self._unfinished_fold(trial, campaign, fold)
            points = tx.set_curve_point(trial.id, fold, step, value)
            fold_values: dict[str, object] = {"attempt": trial.attempt}
            if checkpoint_uri:
                fold_values["checkpoint_uri"] = checkpoint_uri
            tx.upsert_fold(trial.id, fold, now, **fold_values)
            verdict = pruner.at_step(SqlHistory(tx, campaign.id), trial, fold, step, value) if pruner else None
            if verdict is not None:
                prune(tx, campaign, trial, verdict, now)
                return HeartbeatReply(Action.STOP_PRUNED, None)
            expires = self._renew(tx, lease, now)
        bound_curve(self.ctx, campaign, trial.id, fold, points)
        return HeartbeatReply(Action.CONTINUE, expires)

    def report_fold(
        self,
        lease: Lease,
        fold: int,
        value: float,
        metrics: dict[str, float] | None = None,
        checkpoint_uri: str = "",
        *,
        caller: int | None = None,
    ) -> d.Fold:
        value = lim.require_finite("value", value)
        metrics = lim.require_metrics("metrics", metrics or {})
        self._check_checkpoint(checkpoint_uri, lease, fold)
        fast = self.hot.report_fold(lease, fold, value, metrics, checkpoint_uri, caller) if self.hot else None
        if fast is not None:
            return fast
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, lease.agent_id, caller)
            campaign, pruner = self._campaign_and_pruner(tx, lease.trial_id)
            trial = self._locked_trial(tx, lease.trial_id)
            replay = self._replayed_fold(trial, lease, fold, value, metrics, checkpoint_uri)
            if replay is not None:
                return replay
            self._check_lease(trial, lease, now)
            self._unfinished_fold(trial, campaign, fold)
            missing = [metric for metric, _ in campaign.objectives[1:] if metric not in metrics]
            if missing:
                raise InvalidArgument(
                    f"metrics: the campaign's objectives need {missing[0]!r} in every fold's metrics; "
                    f"got {sorted(metrics)}",
                    [("metrics", f"must hold {', '.join(missing)}")],
                )
            values: dict[str, object] = {
                "finished": True,
                "value": value,
                "metrics": metrics,
                "attempt": trial.attempt,
            }
            if checkpoint_uri:
                values["checkpoint_uri"] = checkpoint_uri
            result = tx.upsert_fold(trial.id, fold, now, **values)
            self._renew(tx, lease, now)
            if pruner is not None:
                after = tx.get_trial(trial.id)
                assert after is not None
                if sum(f.finished for f in after.folds) < campaign.folds:
                    verdict = pruner.at_fold(SqlHistory(tx, campaign.id), after)
                    if verdict is not None:
                        prune(tx, campaign, after, verdict, now)
        return result

    def report_event(self, lease: Lease, fold: int, kind: str, reason: str, *, caller: int | None = None) -> None:
        """Adds an event of one of :data:`AGENT_EVENTS` to the leased trial's log."""
        if kind not in AGENT_EVENTS:
            raise InvalidArgument(
                f"kind must be one of {', '.join(AGENT_EVENTS)}, got {clip(kind)!r}",
                [("kind", f"must be one of {', '.join(AGENT_EVENTS)}")],
            )
        lim.require_range("fold", fold, 0)
        lim.require_safe_text("reason", reason, lim.MAX_REASON)
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, lease.agent_id, caller)
            trial = self._leased(tx, lease, now, allow_stopped=True, folds=False)
            if tx.count_events(trial.id, trial.attempt, kind) >= MAX_AGENT_EVENTS:
                raise FailedPrecondition(
                    f"attempt {trial.attempt} of trial {trial.id} has {MAX_AGENT_EVENTS} {kind} events already"
                )
            tx.add_event(trial.id, trial.attempt, kind, now, agent_id=lease.agent_id, reason=f"fold {fold}: {reason}")

    # -- the end of an attempt ---------------------------------------------------------

    def complete(self, lease: Lease, *, caller: int | None = None) -> d.Trial:
        """All K folds reported: the trial is COMPLETED with their mean and spread.
        Completing again under the same lease returns the completed trial unchanged."""
        fast = self.hot.complete(lease, caller) if self.hot else None
        if fast is not None:
            return fast
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, lease.agent_id, caller)
            campaign = self._lock_campaign_of(tx, lease.trial_id)
            trial = self._locked_trial(tx, lease.trial_id)
            if trial.state == d.TrialState.COMPLETED and self._holds(trial, lease):
                return trial  # a retry whose first reply was lost
            self._check_lease(trial, lease, now)
            finished = {f.index: f for f in trial.folds if f.finished}
            missing = [k for k in range(campaign.folds) if k not in finished]
            if missing:
                raise FailedPrecondition(
                    f"trial {trial.id} cannot complete: folds {missing} of {campaign.folds} "
                    "have no reported value (ReportFold first)"
                )
            values = [float(finished[k].value) for k in range(campaign.folds)]  # type: ignore[arg-type]
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            means = None
            if len(campaign.objectives) > 1:  # the mean over folds of each objective
                means = [mean] + [
                    statistics.fmean(float(finished[k].metrics[metric]) for k in range(campaign.folds))
                    for metric, _ in campaign.objectives[1:]
                ]
            tx.finish_trial(trial.id, d.TrialState.COMPLETED, now, value=mean, value_std=std, values=means)
            tx.add_event(trial.id, trial.attempt, "completed", now, agent_id=lease.agent_id)
            finish_campaign_if_done(tx, campaign, now)
            done = tx.get_trial(trial.id)
        assert done is not None
        return done

    def release(self, lease: Lease, state: d.TrialState, reason: str = "", *, caller: int | None = None) -> d.Trial:
        """FAILED and PRUNED are final; PREEMPTED requeues the same trial as attempt + 1
        (its folds, curves and checkpoints kept) unless it was the last attempt."""
        if state not in RELEASE_STATES:
            raise InvalidArgument(
                f"state must be one of {[s.value for s in RELEASE_STATES]}, got {state}",
                [("state", "must be FAILED, PREEMPTED or PRUNED")],
            )
        lim.require_text("reason", reason, lim.MAX_REASON)
        now = self.ctx.clock()
        with self.ctx.storage.write() as tx:
            self._agent(tx, lease.agent_id, caller)
            campaign = self._lock_campaign_of(tx, lease.trial_id)
            trial = self._leased(tx, lease, now)
            tx.add_event(trial.id, trial.attempt, state.value.lower(), now, agent_id=lease.agent_id, reason=reason)
            if state == d.TrialState.PREEMPTED:
                requeue(tx, campaign, trial, now, why=f"preempted: {reason}" if reason else "preempted")
            else:
                tx.finish_trial(trial.id, state, now, error=reason if state == d.TrialState.FAILED else "")
            finish_campaign_if_done(tx, campaign, now)
            out = tx.get_trial(trial.id)
        assert out is not None
        return out

    # -- helpers ---------------------------------------------------------------------

    def _agent(self, tx: Tx, agent_id: str, caller: int | None) -> d.Agent:
        """The registered agent, if the caller's token is the one that registered it."""
        agent = tx.get_agent(agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id!r} is not registered (call Register first)")
        if caller is not None and agent.token_id != caller:
            raise PermissionDenied(
                f"agent {agent_id!r} was registered with another token (or before auth was on); "
                "an agent id can be used only with the token that registered it: register again"
            )
        return agent

    def _campaign_and_pruner(self, tx: Tx, trial_id: int) -> tuple[d.Campaign, Pruner | None]:
        """The trial's campaign, row-locked first when it has a pruner (a pruning decision
        finishes the trial, which takes the campaign lock; campaign before trial is the
        lock order), and its pruner."""
        trial = tx.get_trial(trial_id, folds=False)
        if trial is None:
            raise NotFound(f"trial {trial_id} does not exist")
        campaign = campaign_or_404(tx, trial.campaign_id)
        pruner = pruner_of(campaign)
        if pruner is not None:
            campaign = campaign_or_404(tx, trial.campaign_id, lock=True)
        return campaign, pruner

    @staticmethod
    def _holds(trial: d.Trial, lease: Lease) -> bool:
        return trial.lease_id == lease.lease_id and trial.agent_id == lease.agent_id

    def _replayed_fold(
        self, trial: d.Trial, lease: Lease, fold: int, value: float, metrics: dict[str, float], checkpoint_uri: str
    ) -> d.Fold | None:
        """The finished fold, if this lease already reported it with this content."""
        if not self._holds(trial, lease):
            return None
        done = next((f for f in trial.folds if f.index == fold and f.finished), None)
        if done is None or done.attempt != trial.attempt:
            return None
        same = done.value == value and done.metrics == metrics
        if same and checkpoint_uri in ("", done.checkpoint_uri):
            return done
        raise FailedPrecondition(
            f"fold {fold} of trial {trial.id} is already finished with value {done.value}; "
            "a retry must repeat the same value, metrics and checkpoint"
        )

    def _lock_campaign_of(self, tx: Tx, trial_id: int) -> d.Campaign:
        # Campaign before trial: the lock order every writer follows (see acquire).
        trial = tx.get_trial(trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} does not exist")
        return campaign_or_404(tx, trial.campaign_id, lock=True)

    def _leased(
        self, tx: Tx, lease: Lease, now: datetime, *, allow_stopped: bool = False, folds: bool = True
    ) -> d.Trial:
        """The trial, row-locked, if ``lease`` holds it now (see _check_lease)."""
        return self._check_lease(self._locked_trial(tx, lease.trial_id, folds), lease, now, allow_stopped)

    @staticmethod
    def _locked_trial(tx: Tx, trial_id: int, folds: bool = True) -> d.Trial:
        trial = tx.get_trial(trial_id, lock=True, folds=folds)
        if trial is None:
            raise NotFound(f"trial {trial_id} does not exist")
        return trial

    @staticmethod
    def _check_lease(trial: d.Trial, lease: Lease, now: datetime, allow_stopped: bool = False) -> d.Trial:
        """FailedPrecondition unless ``lease`` is the trial's current, unexpired lease and
        it is RUNNING (or CANCELLED/PRUNED with ``allow_stopped``)."""
        if trial.lease_id != lease.lease_id or trial.agent_id != lease.agent_id:
            raise FailedPrecondition(
                f"trial {trial.id} is not held by agent {lease.agent_id} under lease {lease.lease_id!r} "
                f"(it is {trial.state.value}, attempt {trial.attempt}): the lease expired or was released"
            )
        stopped = (d.TrialState.CANCELLED, d.TrialState.PRUNED)
        if allow_stopped and trial.state in stopped:
            return trial
        if trial.state != d.TrialState.RUNNING:
            raise FailedPrecondition(
                f"trial {trial.id} is {trial.state.value}, not RUNNING: nothing more can be reported"
            )
        if trial.lease_expires_at is not None and trial.lease_expires_at < now:
            raise FailedPrecondition(
                f"the lease of trial {trial.id} expired at {trial.lease_expires_at.isoformat()}; "
                "the trial goes back to the queue"
            )
        return trial

    def _renew(self, tx: Tx, lease: Lease, now: datetime) -> datetime:
        expires = now + timedelta(seconds=self.ctx.settings.lease_seconds)
        tx.update_trial(lease.trial_id, lease_expires_at=expires)
        return expires

    @staticmethod
    def _unfinished_fold(trial: d.Trial, campaign: d.Campaign, fold: int) -> None:
        if not 0 <= fold < campaign.folds:
            raise InvalidArgument(
                f"fold {fold} does not exist: campaign {campaign.id} has {campaign.folds} folds "
                f"(0..{campaign.folds - 1})",
                [("fold", f"must be in 0..{campaign.folds - 1}")],
            )
        if any(f.index == fold and f.finished for f in trial.folds):
            raise FailedPrecondition(f"fold {fold} of trial {trial.id} is already finished")


def requeue(tx: Tx, campaign: d.Campaign, trial: d.Trial, now: datetime, *, why: str) -> None:
    """Puts a trial that lost its agent back in the queue as attempt + 1, or fails it
    after ``max_attempts``. Folds, curves and checkpoint URIs stay."""
    if trial.attempt >= campaign.max_attempts:
        tx.finish_trial(
            trial.id,
            d.TrialState.FAILED,
            now,
            error=f"{why} on attempt {trial.attempt} of {campaign.max_attempts}",
            lease_id="",
        )
        tx.add_event(trial.id, trial.attempt, "failed", now, reason=f"max_attempts reached: {why}")
        return
    tx.update_trial(
        trial.id,
        state=d.TrialState.QUEUED,
        attempt=trial.attempt + 1,
        agent_id="",
        lease_id="",
        lease_expires_at=None,
    )
