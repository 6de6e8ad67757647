"""The agent loop of one trial group: acquire a trial, train its folds over the fold
groups, complete or give it back; until the campaign is done, the allocation is
signalled, or its walltime would not fit another trial."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcopt import AgentClient, ApiError, Lease, TrialState
from hpcopt.core.records import QueueState, Trial
from hpcopt_agent.comm import Comms, Notices, any_true, bcast, gather
from hpcopt_agent.fold import FoldOutcome, FoldTrainer, TrialInfo
from hpcopt_agent.outcomes import Decision, Outcome
from hpcopt_agent.pbt import Parent, parent_of, readable_parent
from hpcopt_agent.runtime import Context, StopSignal, Walltime
from hpcopt_agent.script.fold import ScriptFold
from hpcopt_agent.server import Heartbeat, TrialLink, retrying

log = logging.getLogger("hpcopt_agent")


#: How often an agent waiting on a paused campaign says so again.
SAY_WAIT_SECONDS = 600.0


@dataclass(frozen=True)
class Grant:
    """What the group leader tells its group about an acquired trial."""

    info: TrialInfo
    lease: Lease
    finished: frozenset[int]
    resume: dict[int, str]
    #: The folds this lease trains, ``0 .. folds-1`` (a multi-fidelity unit of work; the
    #: campaign's K otherwise).
    folds: int


class GroupLoop:
    def __init__(
        self,
        *,
        comms: Comms,
        client: AgentClient | None,
        agent_id: str,
        campaign_id: int,
        heartbeat_seconds: float,
        trainer: FoldTrainer | ScriptFold,
        splits: list[tuple[np.ndarray, np.ndarray]],
        stop: StopSignal,
        walltime: Walltime,
        context: Context,
        max_trials: int | None = None,
        patience: float = 120.0,
        drain_below: int | None = None,
        wave_base: int = 0,
        replan_wait: float | None = None,
        notices: Notices | None = None,
        would_change: Callable[[int], bool] | None = None,
    ) -> None:
        self.comms = comms
        self.client = client  # on fold leaders
        self.agent_id = agent_id
        self.campaign_id = campaign_id
        self.heartbeat_seconds = heartbeat_seconds
        self.trainer = trainer
        self.splits = splits
        self.stop = stop
        self.walltime = walltime
        self.context = context
        self.max_trials = max_trials
        self.patience = patience
        self.trials = 0
        #: ``--groups auto``: leave for a re-plan when the last wave would leave groups
        #: idle (and fewer trials than this are left: a re-plan that kept the layout sets it).
        self.drain_below = drain_below
        #: Trials left to start when this layout was planned: with what is left now it
        #: says how far into a wave of ``groups`` trials the job is.
        self.wave_base = wave_base
        #: ``--groups auto``: leave for a re-plan when this group has waited this long for
        #: work the parallel budget would not give it (other agents hold the rest).
        self.replan_wait = replan_wait
        self.waiting_since: float | None = None
        #: Why the server last said to wait (a PAUSED campaign), and when it was logged.
        self.said_wait, self.said_wait_at = "", 0.0
        #: How this group's leader asks the others to re-plan, and hears them ask.
        self.notices = notices
        #: Whether a re-plan for that many trials would change the layout (the job's
        #: model): a drain re-plan that would keep it only makes every group wait.
        self.would_change = would_change
        self.replan = False
        #: Whether to ask for finished trials' analyses users asked for (a campaign with
        #: an ``analysis`` section, trained by a Task).
        self.analyses = isinstance(trainer, FoldTrainer) and trainer.s.analysis is not None

    def run(self) -> tuple[str, bool]:
        """Runs trials until there is a reason to stop; returns it, and whether it is a
        normal end (done, signalled, walltime) rather than a server that failed us."""
        while True:
            signalled = any_true(self.comms.group, self.stop.requested)
            decision = None
            if self.comms.is_group_leader:
                try:
                    decision = self._decide(signalled)
                except ApiError as exc:
                    decision = (Decision.ERROR, f"the server failed: {exc}")
            kind, payload = bcast(self.comms.group, decision)
            if kind.ends:
                self.replan = kind == Decision.REPLAN
                if self.replan and self.comms.is_group_leader:
                    log.info("leaving the layout at this trial boundary to re-plan: %s", payload)
                return str(payload), kind != Decision.ERROR
            if kind == Decision.WAIT:
                continue
            if kind == Decision.ANALYSE:
                self._run_analysis(*payload)
                continue
            self._run_trial(payload)
            self.trials += 1

    # -- group leader ------------------------------------------------------------------

    def _decide(self, signalled: bool) -> tuple[Decision, Any]:
        if signalled and self.stop.name == "WALLTIME":
            left = self.walltime.remaining() or 0.0
            return Decision.STOP, (
                f"{left:.0f} s of walltime left, within the last {self.walltime.reserve:.0f} s (--reserve) in which "
                "trials checkpoint and go back"
            )
        if signalled:
            return Decision.STOP, f"{self.stop.name or 'a signal'} received"
        if self.max_trials is not None and self.trials >= self.max_trials:
            return Decision.STOP, f"--max-trials {self.max_trials} reached"
        if not self.walltime.fits_another():
            return Decision.STOP, self.walltime.why_not()
        assert self.client is not None
        client = self.client
        groups = self.comms.layout.groups
        if self.notices is not None and self.notices.pending():
            return Decision.REPLAN, "another trial group asked for a re-plan"
        if self.analyses:  # a finished trial's analysis a user asked for goes first
            asked = self._asked_analysis(client)
            if asked is not None:
                return Decision.ANALYSE, asked
        decision = self._acquire(client, groups)
        if decision[0] == Decision.REPLAN and self.notices is not None:
            size = self.comms.layout.group_size
            self.notices.ask([g * size for g in range(groups)])
        return decision

    def _acquire(self, client: AgentClient, groups: int) -> tuple[Decision, Any]:
        if self.drain_below is not None and groups > 1:
            # The last wave is partial: fewer trials are left than the groups that have not
            # started one in this wave (trials started since the plan, modulo the groups).
            q = self._queue(client)
            if q is not None:
                waiting = groups - (self.wave_base - q.unstarted) % groups
                if 0 < q.unstarted < min(waiting, self.drain_below):
                    if self.would_change is None or self.would_change(q.unstarted):
                        return Decision.REPLAN, f"{q.unstarted} trial(s) left to start for {waiting} trial group(s)"
                    self.drain_below = q.unstarted  # the layout suits them: not again until fewer remain
        got = retrying(lambda: client.acquire(self.agent_id, self.campaign_id), "Acquire", self.patience)
        if got.status == "done":
            return Decision.STOP, "the campaign is finished"
        if got.trial is None or got.lease is None:  # wait: the parallel budget is in use, or paused
            now = time.monotonic()
            if got.wait_reason and (got.wait_reason != self.said_wait or now - self.said_wait_at >= SAY_WAIT_SECONDS):
                log.warning("waiting: %s", got.wait_reason)  # once, then every SAY_WAIT_SECONDS
                self.said_wait, self.said_wait_at = got.wait_reason, now
            self.waiting_since = self.waiting_since or now
            if self.replan_wait is not None and groups > 1 and now - self.waiting_since >= self.replan_wait:
                # Only when trials are left that max_parallel holds back: waiting for a
                # suggestion or for the last trials to finish is no reason to re-lay.
                q = self._queue(client)
                if q is not None and q.unstarted > 0 and 0 < q.max_parallel <= q.running:
                    waited = now - self.waiting_since
                    return Decision.REPLAN, (
                        f"trial group {self.comms.group_index} waited {waited:.0f} s for a trial: max_parallel "
                        f"{q.max_parallel} in use ({q.running} running)"
                    )
                self.waiting_since = now  # look again after another --replan-wait
            deadline = time.monotonic() + max(got.retry_after_seconds, 0.2)
            while time.monotonic() < deadline and not self.stop.requested:
                time.sleep(0.1)
            return Decision.WAIT, None
        self.waiting_since = None
        trial, lease = got.trial, got.lease
        finished = frozenset(f.index for f in trial.folds if f.finished)
        resume = {f.index: f.checkpoint_uri for f in trial.folds if not f.finished and f.checkpoint_uri}
        if trial.lineage is not None:
            fresh = [f for f in range(self.comms.layout.folds) if f not in finished and f not in resume]
            readable = readable_parent(
                lambda parent, fold, why: retrying(
                    lambda: client.parent_unreadable(lease, parent, fold, why), "ReportUnreadableParent", self.patience
                ),
                trial,
                self.trainer.root,
                self.trainer.server_id,
                fresh,
                self._pause,
                self.heartbeat_seconds,
            )
            if readable is None:  # told to stop while it waited: the next decision stops
                why = "stopped while waiting for a readable parent checkpoint"
                retrying(lambda: client.release(lease, TrialState.PREEMPTED, why), "Release", self.patience)
                return Decision.WAIT, None
            trial = readable
        params = {k: trial.params[k] for k in self.trainer.s.param_names if k in trial.params}
        params.update((k, v) for k, v in trial.params.items() if k not in params)
        info = TrialInfo(self.campaign_id, trial.id, trial.number, trial.attempt, params, *_interval(trial))
        folds = (
            self.comms.layout.folds if trial.fidelity is None else min(trial.fidelity.folds, self.comms.layout.folds)
        )
        return Decision.TRIAL, Grant(info, lease, finished, resume, folds)

    def _asked_analysis(self, client: AgentClient) -> tuple[Trial, Lease, dict[str, Any]] | None:
        """A finished trial's analysis a user asked for, leased to this agent: (the
        trial, the lease, its parameters); None when none is asked (or the server is
        older than requested analyses: then never again)."""
        order = self.trainer.s.param_names
        try:
            got = retrying(
                lambda: client.acquire_analysis(self.agent_id, self.campaign_id, order),
                "AcquireAnalysis",
                self.patience,
            )
        except ApiError as exc:
            if exc.code != "UNIMPLEMENTED":
                raise
            self.analyses = False
            return None
        if got is None:
            return None
        trial, lease = got
        log.info("trial #%d (id %d): its analysis, asked for after it finished", trial.number, trial.id)
        return trial, lease, {k: v for k, v in trial.params.items()}

    def _pause(self, seconds: float) -> bool:
        """Sleeps ``seconds``; False (at once) when the agent is told to stop."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stop.requested or not self.walltime.fits_another():
                return False
            time.sleep(0.1)
        return True

    def _queue(self, client: AgentClient) -> QueueState | None:
        """What the campaign has left; None from a server older than the planner (no
        Queue call), which turns re-planning off."""
        try:
            return retrying(lambda: client.queue(self.agent_id, self.campaign_id), "Queue", self.patience)
        except ApiError as exc:
            if exc.code != "UNIMPLEMENTED":
                raise
            self.drain_below = self.replan_wait = None
            return None

    # -- every rank ----------------------------------------------------------------------

    def _run_trial(self, grant: Grant) -> None:
        info, layout = grant.info, self.comms.layout
        t0 = time.monotonic()
        link = TrialLink(self.client, grant.lease, self.patience) if self.client is not None else None
        heartbeat = None
        if self.comms.is_group_leader and link is not None:
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in info.params.items())
            again = f", attempt {info.attempt}" if info.attempt > 1 else ""
            skipped = f"; folds {sorted(grant.finished)} already done" if grant.finished else ""
            log.info(
                "trial #%d (id %d%s): %s%s%s%s",
                info.number,
                info.trial_id,
                again,
                params,
                skipped,
                _pbt(grant),
                _unit(grant, layout.folds),
            )
            heartbeat = Heartbeat(link, self.heartbeat_seconds)
            heartbeat.start()
        tracking = self.trainer.tracking
        if tracking.uses_mlflow:  # the trial's run, which every fold's run nests in
            run = ""
            if self.comms.is_group_leader and link is not None:
                run = tracking.trial_run(info.campaign_id, info.trial_id, info.number, dict(info.params))
            tracking.set_trial(info.campaign_id, info.number, bcast(self.comms.group, run))
        remaining = [k for k in range(grant.folds) if k not in grant.finished]
        outcomes: list[FoldOutcome] = []
        fold_link = link if self.comms.is_fold_leader else None
        for fold in layout.folds_for(self.comms.fold_index, remaining):
            self.context.what = f"trial #{info.number} fold {fold}"
            train, validation = self.splits[fold]
            outcome = self.trainer.run(info, fold, train, validation, fold_link, grant.resume.get(fold, ""))
            outcomes.append(outcome)
            if outcome.status != Outcome.COMPLETED:
                break
        self.context.what = f"trial #{info.number}"
        everything = gather(self.comms.group, outcomes if self.comms.is_fold_leader else [])
        if heartbeat is not None:
            heartbeat.stop()
        if everything is not None and link is not None:
            ended = [o for part in everything for o in part]
            value = self._finish(link, info, ended, heartbeat)
            if tracking.uses_mlflow:
                status = _run_status(ended, len(remaining))
                tracking.trial_end(info.campaign_id, info.number, status, value if status == "FINISHED" else None)
        self.walltime.record(time.monotonic() - t0)
        self.context.what = ""

    def _run_analysis(self, trial: Trial, lease: Lease, params: dict[str, Any]) -> None:
        """Every rank: the asked-for analysis of a finished trial, each fold group taking
        its folds (``curvature/requested.py``); the group leader ends it, DONE or FAILED
        naming the fold that failed."""
        from hpcopt_agent.curvature.requested import analyse_kept

        assert isinstance(self.trainer, FoldTrainer)
        client = self.client if self.comms.is_fold_leader else None
        errors: list[str] = []
        done = 0
        for fold in self.comms.layout.folds_for(self.comms.fold_index, list(range(self.comms.layout.folds))):
            self.context.what = f"trial #{trial.number} fold {fold} (analysis)"
            why = analyse_kept(self.trainer, trial, params, fold, self.splits[fold][0], client, lease)
            if why:
                errors.append(why)
                break
            done += 1
        self.context.what = ""
        everything = gather(self.comms.group, (errors, done) if self.comms.is_fold_leader else ([], 0))
        if everything is None or self.client is None:
            return
        failed = [e for part, _ in everything for e in part]
        analysed = sum(n for _, n in everything)
        summary = f"{analysed} fold(s) analysed from their checkpoints"
        error = " ".join("; ".join(failed).split())[:1000]
        if failed:
            log.error("trial #%d: the asked-for analysis FAILED: %s", trial.number, error)
        else:
            log.info("trial #%d: %s", trial.number, summary)
        client_ = self.client
        try:
            retrying(lambda: client_.finish_analysis(lease, error, summary), "FinishAnalysis", self.patience)
        except ApiError as exc:
            log.warning("trial #%d: could not end its analysis: %s", trial.number, exc)

    def _finish(
        self, link: TrialLink, info: TrialInfo, outcomes: list[FoldOutcome], hb: Heartbeat | None
    ) -> float | None:
        """Ends the attempt on the server; the trial's value once it COMPLETED (else None)."""
        by = {s: [o for o in outcomes if o.status == s] for s in {o.status for o in outcomes}}
        trained = sum(o.epochs for o in outcomes)
        if Outcome.FAILED in by:
            log.error(
                "FAILED (%s)", by[Outcome.FAILED][0].error.splitlines()[0] if by[Outcome.FAILED][0].error else "error"
            )
        elif Outcome.PREEMPTED in by:
            reason = f"{self.stop.name or 'signal'} on {socket.gethostname()}"
            try:
                link.release(TrialState.PREEMPTED, reason)
                log.warning(
                    "PREEMPTED: checkpointed %d fold(s) in progress; %d epochs trained",
                    len(by[Outcome.PREEMPTED]),
                    trained,
                )
            except Exception as exc:  # the lease may be gone already; the server requeues it then
                log.warning("could not release as PREEMPTED: %s", exc)
        elif Outcome.LOST in by or (hb is not None and hb.action == Outcome.LOST):
            log.warning("the lease was lost (expired or taken over); the server requeues the trial")
        elif Outcome.PRUNED in by or Outcome.CANCELLED in by:
            log.info("stopped by the server (%s)", ", ".join(s for s in (Outcome.PRUNED, Outcome.CANCELLED) if s in by))
        else:
            try:
                done = link.complete()
            except Exception as exc:
                log.error("could not complete: %s", exc)
                return None
            if done.state == TrialState.PAUSED and done.fidelity is not None:
                f = done.fidelity
                log.info(
                    "PAUSED after rung %d: value %.6g over %d of %d folds at %d epochs (%d epochs trained now); the "
                    "searcher promotes it or stops it",
                    f.rung,
                    done.value,
                    f.folds,
                    self.comms.layout.folds,
                    f.epochs,
                    trained,
                )
                return None
            log.info(
                "COMPLETED: value %.6g over %d folds (%d epochs trained now)",
                done.value,
                self.comms.layout.folds,
                trained,
            )
            return done.value
        return None


def _run_status(outcomes: list[FoldOutcome], folds: int) -> str:
    """The MLflow status of a trial's run after this attempt (``folds``: the folds it
    trained): FAILED, KILLED (preempted, pruned, lost: not a result) or FINISHED."""
    states = {o.status for o in outcomes}
    if Outcome.FAILED in states:
        return "FAILED"
    return "KILLED" if states - {Outcome.COMPLETED} or len(outcomes) < folds else "FINISHED"


def _interval(trial: Trial) -> tuple[int, Parent | None]:
    """A PBT interval's stop epoch and parent checkpoint, a multi-fidelity unit's epochs
    ((0, None) for other trials)."""
    if trial.fidelity is not None:
        return trial.fidelity.epochs, None
    return (0, None) if trial.lineage is None else (trial.lineage.stop_epoch, parent_of(trial))


def _unit(grant: Grant, k: int) -> str:
    """A multi-fidelity unit of work, for the trial's log line ("" for other trials)."""
    if grant.folds >= k and not grant.info.stop_epoch:
        return ""
    return f"; rung: folds 0..{grant.folds - 1} of {k} to epoch {grant.info.stop_epoch}"


def _pbt(grant: Grant) -> str:
    """A PBT interval's place, for the trial's log line ("" for other trials)."""
    parent, stop = grant.info.parent, grant.info.stop_epoch
    if not stop:
        return ""
    start = f"from trial #{parent.number}'s epoch {parent.epoch}" if parent else "from scratch"
    return f"; PBT: epochs to {stop}, {start}"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
