"""Agent use cases: register, acquire under a lease, heartbeat, report, complete, release.

Each call checks its input and its caller here, then makes one call of the storage's
agent writer (:class:`~hpcopt_server.storage.agent_calls.AgentCalls`), which either
does it or names why not; that reason becomes the error (or, for a stopped trial's
heartbeat or report, the STOP action) answered here.

Every report names its lease (agent id, trial id, lease id). A report whose lease is not
the trial's current one, or has expired, is refused with FailedPrecondition and changes
nothing: the trial may already be running elsewhere.

With auth on, an agent id belongs to the token that registered it: a call naming that
agent with any other token is refused with PermissionDenied (agent ids are visible to
read tokens at ``/agents``, so they are not secrets). ``caller`` is the presented
token's id, None with auth off. Which token registered an agent never changes, so it is
cached per process.

Pruning: after a report is stored, the pruner decides on committed data, without the
campaign lock; a trial it stops is pruned under the lock if the lease still holds it.

Retries are safe: ``report_fold`` with the same lease and the same content as a
finished fold, and ``complete`` of a trial this lease already completed, answer as the
first call did and change nothing, so an agent whose reply was lost can call again.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from hpcopt.core.analysis_doc import MAX_DOCUMENT_BYTES, check_document
from hpcopt.core.checkpoints import check_reported
from hpcopt.core.documents import clip
from hpcopt.core.planner import Point
from hpcopt.errors import CheckpointRefused
from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, ServiceError
from hpcopt_server.pruners import Verdict
from hpcopt_server.rules import Refusal
from hpcopt_server.service import limits as lim
from hpcopt_server.service.acquisitions import AcquireQueue
from hpcopt_server.service.agent_messages import (
    AcquireStatus,
    Acquisition,
    Action,
    HeartbeatReply,
    Lease,
    QueueState,
    Registration,
)
from hpcopt_server.service.analysing import should_analyse
from hpcopt_server.service.context import Context, bound_curve, campaign_or_404
from hpcopt_server.service.intervals import replan_interval
from hpcopt_server.service.pruning import SqlHistory, pruner_of
from hpcopt_server.service.throughput import (
    MAX_PROBE_ROWS,
    campaign_schemes,
    check_against_folds,
    check_probe,
    measured,
    measured_folds,
)
from hpcopt_server.storage.agent_calls import DONE, PAUSED, Refused

RELEASE_STATES = (d.TrialState.FAILED, d.TrialState.PREEMPTED, d.TrialState.PRUNED)
#: Event kinds an agent may add to a trial's log (ReportEvent), and how many of each one
#: attempt may hold: a fold group reports a refused checkpoint once per fold it starts, and
#: the parameters the task never read once per attempt (after fold 0).
AGENT_EVENTS = ("checkpoint_refused", "params_unread", "params_outside_space", "analysis")
MAX_AGENT_EVENTS = 100
_MAX_CACHED = 200_000

__all__ = [
    "AcquireStatus",
    "Acquisition",
    "Action",
    "AgentService",
    "HeartbeatReply",
    "Lease",
    "Registration",
]


class AgentService:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.calls = ctx.agent_calls
        self.queue = AcquireQueue()
        self._server_id = ""
        self._tokens: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def server_id(self) -> str:
        """This database's identity (stored on first use; replicas share it)."""
        if not self._server_id:
            with self.ctx.storage.write() as tx:
                self._server_id = tx.flags.ensure("server_id", uuid.uuid4().hex, self.ctx.clock())
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
        found: list[Point] = []
        with self.ctx.storage.write() as tx:
            if campaign_id:
                campaign = campaign_or_404(tx, campaign_id)
                spec = campaign.spec
                found, _ = measured(tx, campaign)
            tx.agents.insert(agent)
        self._remember(agent.id, caller)
        s = self.ctx.settings
        points = tuple(p.as_dict() for p in found)
        return Registration(agent.id, s.lease_seconds, s.heartbeat_seconds, spec, self.server_id(), points)

    def acquire(self, agent_id: str, campaign_id: int, *, caller: int | None = None) -> Acquisition:
        """Hands the agent one trial of the campaign under a new lease.

        A QUEUED trial (one that was preempted or lost its lease) goes first, so it
        resumes before new work starts; otherwise the optimizer suggests a new trial
        while the budget allows. The campaign row lock makes the budget exact across
        threads and server replicas; the acquisitions waiting in this process are
        served together (``acquisitions.py``).
        """
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        lim.require_id("campaign_id", campaign_id)
        self.check_agent(agent_id, caller)
        if self.calls.campaign(campaign_id) is None:  # before the queue keeps a gate for it
            raise NotFound(f"campaign {campaign_id} does not exist")
        t0 = time.perf_counter()
        answer = self.queue.acquire(campaign_id, agent_id, lambda agents: self._serve(campaign_id, agents))
        self.ctx.observe_acquire(time.perf_counter() - t0)
        assert isinstance(answer, Acquisition)
        return answer

    def _serve(self, campaign_id: int, agents: list[str]) -> list[object]:
        now = self.ctx.clock()
        expires = self._expiry(now)
        got = self.calls.acquire(
            campaign_id,
            agents,
            now,
            expires,
            lambda tx, c, n, active: self.ctx.optimizers.suggest(tx, c, n, active=active),
        )
        if got is None:
            raise NotFound(f"campaign {campaign_id} does not exist")
        campaign = self.calls.campaign(campaign_id)
        spec = None if campaign is None else campaign.spec
        why = ""
        if PAUSED in got:
            with self.ctx.storage.read() as tx:
                paused = tx.campaigns.get(campaign_id)
            why = f"campaign {campaign_id} is PAUSED: {(paused.pause_reason if paused else None) or 'paused'}"
        wait = Acquisition(AcquireStatus.WAIT, retry_after_seconds=self.ctx.settings.wait_seconds, wait_reason=why)
        return [
            Acquisition(AcquireStatus.GRANTED, g, g.lease_id, g.lease_expires_at, campaign_spec=spec)
            if isinstance(g, d.Trial)
            else Acquisition(AcquireStatus.DONE)
            if g == DONE
            else wait
            for g in got
        ]

    def queue_state(
        self, agent_id: str, campaign_id: int, *, with_throughput: bool = False, caller: int | None = None
    ) -> QueueState:
        """What is left to start of the campaign, leasing nothing (the planner's drain),
        and on request the campaign's measured fold throughput."""
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        lim.require_id("campaign_id", campaign_id)
        self.check_agent(agent_id, caller)
        found: list[Point] = []
        with self.ctx.storage.read() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            counts = tx.campaigns.trial_counts([campaign_id]).get(campaign_id, {})
            if with_throughput:
                found, _ = measured(tx, campaign)
        finished = sum(n for state, n in counts.items() if d.TrialState(state).finished)
        running = counts.get(d.TrialState.RUNNING, 0)
        done = campaign.state not in rules.OPEN_STATES or finished >= campaign.max_trials
        unstarted = 0 if done else max(0, campaign.max_trials - finished - running)
        parallel = (campaign.spec.get("budget") or {}).get("max_parallel") or 0
        return QueueState(unstarted, running, int(parallel), done, tuple(p.as_dict() for p in found))

    def report_throughput(
        self,
        agent_id: str,
        campaign_id: int,
        points: list[tuple[str, int, int, float]],
        train_samples: int,
        *,
        caller: int | None = None,
    ) -> int:
        """Stores what the agent's throughput probe measured for the campaign, (scheme,
        ranks, nodes, samples per second) per width; how many were stored. Only from an
        agent registered for the campaign, each rate plausible (``check_probe``,
        ``check_against_folds``); one row per agent and width, the newest kept."""
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        lim.require_id("campaign_id", campaign_id)
        self.check_agent(agent_id, caller)
        checked = check_probe(points, train_samples)
        with self.ctx.storage.write() as tx:
            campaign = campaign_or_404(tx, campaign_id)
            agent = tx.agents.get(agent_id)
            if agent is None or agent.campaign_id != campaign_id:
                held = None if agent is None else agent.campaign_id
                serves = "no campaign" if held is None else f"campaign {held}"
                raise FailedPrecondition(
                    f"campaign_id: agent {agent_id} is registered for {serves}, not campaign {campaign_id}; only an "
                    "agent registered for a campaign reports its throughput",
                    [("campaign_id", f"must be the campaign the agent registered for ({serves})")],
                )
            schemes = campaign_schemes(campaign.spec)
            for n, (scheme, *_) in enumerate(checked):
                if scheme not in schemes:
                    raise InvalidArgument(
                        f"points[{n}].scheme: {scheme!r} is not a scheme of campaign {campaign_id} "
                        f"(it trains with {', '.join(sorted(schemes))})"
                    )
            check_against_folds(checked, measured_folds(tx, campaign))
            return tx.campaigns.add_probes(
                campaign_id, agent_id, checked, train_samples, self.ctx.clock(), keep=MAX_PROBE_ROWS
            )

    def deregister(self, agent_id: str, reason: str = "", *, caller: int | None = None) -> list[int]:
        """Ends an agent's registration (its exit; ``reason`` says why when it refused to
        work). Trials it still holds go back to the queue as after a lost lease; their
        ids are returned. Saying goodbye twice is harmless."""
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        lim.require_safe_text("reason", reason, lim.MAX_EXIT_REASON)
        self.check_agent(agent_id, caller)
        return self.calls.deregister(agent_id, self.ctx.clock(), reason)

    def resize(self, agent_id: str, ranks: int, gpus: int, *, caller: int | None = None) -> None:
        """The agent's trial group has ``ranks`` ranks and ``gpus`` GPUs now (``--groups
        auto`` laid its allocation out after registering, or re-planned); the agents list
        shows them from now on."""
        lim.require_text("agent_id", agent_id, lim.MAX_SHORT)
        lim.require_range("ranks", ranks, 1)
        lim.require_range("gpus", gpus, 0)
        self.check_agent(agent_id, caller)
        with self.ctx.storage.write() as tx:
            tx.agents.resize(agent_id, ranks, gpus, self.ctx.clock())

    # -- while the trial runs ----------------------------------------------------------

    def heartbeat(self, lease: Lease, *, caller: int | None = None) -> HeartbeatReply:
        self.check_agent(lease.agent_id, caller)
        now = self.ctx.clock()
        expires = self._expiry(now)
        refused = self.calls.heartbeat(lease, now, expires)
        if refused is not None:
            return self._stop(refused, lease)
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
        self.check_agent(lease.agent_id, caller)
        now = self.ctx.clock()
        expires = self._expiry(now)
        done = self.calls.report(lease, fold, step, value, checkpoint_uri, now, expires)
        if isinstance(done, Refused):
            return self._stop(done, lease, fold)
        bound_curve(self.ctx, done.campaign, lease.trial_id, fold, done.points)
        pruner = pruner_of(done.campaign)
        if pruner is not None and self._pruned(
            lease, done.campaign, lambda h, t: pruner.at_step(h, t, fold, step, value)
        ):
            return HeartbeatReply(Action.PRUNED, None)
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
        self.check_agent(lease.agent_id, caller)
        now = self.ctx.clock()
        done = self.calls.finish_fold(lease, fold, value, metrics, checkpoint_uri, now, self._expiry(now))
        if isinstance(done, Refused):
            raise self._error(done, lease, fold=fold, metrics=metrics)
        pruner = pruner_of(done.campaign)
        if pruner is not None and not done.replayed:
            folds = done.campaign.folds
            self._pruned(
                lease,
                done.campaign,
                lambda h, t: pruner.at_fold(h, t) if sum(f.finished for f in t.folds) < folds else None,
            )
        return done.fold

    def report_event(self, lease: Lease, fold: int, kind: str, reason: str, *, caller: int | None = None) -> None:
        """Adds an event of one of :data:`AGENT_EVENTS` to the leased trial's log."""
        if kind not in AGENT_EVENTS:
            raise InvalidArgument(
                f"kind must be one of {', '.join(AGENT_EVENTS)}, got {clip(kind)!r}",
                [("kind", f"must be one of {', '.join(AGENT_EVENTS)}")],
            )
        lim.require_range("fold", fold, 0)
        lim.require_safe_text("reason", reason, lim.MAX_REASON)
        self.check_agent(lease.agent_id, caller)
        refused = self.calls.add_event(lease, kind, f"fold {fold}: {reason}", self.ctx.clock(), MAX_AGENT_EVENTS)
        if refused is not None:
            raise self._error(refused, lease, kind=kind)

    def report_analysis(self, lease: Lease, fold: int, document: str, *, caller: int | None = None) -> None:
        """Stores a fold's analysis (``hpcopt.core.analysis_doc``) with the leased trial,
        replacing an earlier attempt's; refused, naming the field, unless it is the
        schema's plain numbers."""
        lim.require_range("fold", fold, 0)
        if len(document) > MAX_DOCUMENT_BYTES:
            raise InvalidArgument(
                f"document: {len(document):,} characters; an analysis is at most {MAX_DOCUMENT_BYTES:,}",
                [("document", f"at most {MAX_DOCUMENT_BYTES:,} characters")],
            )
        try:
            doc = check_document(json.loads(document))
        except ValueError as exc:  # not JSON, or not the schema (DocumentError)
            errors = getattr(exc, "errors", None) or [("document", f"not JSON: {exc}")]
            raise InvalidArgument("; ".join(f"{f}: {m}" for f, m in errors), errors) from None
        self.check_agent(lease.agent_id, caller)
        refused = self.calls.save_analysis(lease, fold, doc, self.ctx.clock())
        if refused is not None:
            raise self._error(refused, lease, kind="analysis")

    def should_analyse(
        self, lease: Lease, fold: int, metrics: dict[str, float], *, caller: int | None = None
    ) -> tuple[bool, str]:
        """Whether the leased trial's fold, which has trained its last epoch with
        ``metrics``, is analysed (``analysing.py``), and why; refused like any report
        when the lease does not hold the trial."""
        lim.require_range("fold", fold, 0)
        metrics = lim.require_metrics("metrics", metrics)
        self.check_agent(lease.agent_id, caller)
        with self.ctx.storage.read() as tx:
            trial = tx.trials.get(lease.trial_id, folds=False)
            why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, self.ctx.clock())
            if trial is None or why is not None:
                raise self._error(Refused(why or Refusal.CHANGED, trial), lease, kind="analysis")
            campaign = campaign_or_404(tx, trial.campaign_id)
            bad = rules.fold_refusal(fold, campaign.folds, ())
            if bad is not None:
                raise self._error(Refused(bad, trial), lease, fold=fold)
            return should_analyse(tx, campaign, trial.id, metrics)

    def parent_unreadable(
        self, lease: Lease, parent_trial_id: int, fold: int, reason: str, *, caller: int | None = None
    ) -> d.Trial:
        """A PBT interval whose agent cannot read its parent's checkpoints: recorded, and
        the interval re-planned in place (``intervals.py``); the interval as it now is
        (with the same parent: it waits, and the agent asks again)."""
        lim.require_id("parent_trial_id", parent_trial_id)
        lim.require_range("fold", fold, 0)
        lim.require_safe_text("reason", reason, lim.MAX_EXIT_REASON)
        self.check_agent(lease.agent_id, caller)
        done = replan_interval(self.ctx, lease, parent_trial_id, fold, reason, self._expiry(self.ctx.clock()))
        if isinstance(done, Refused):
            raise self._error(done, lease)
        return done

    # -- the end of an attempt ---------------------------------------------------------

    def complete(self, lease: Lease, *, caller: int | None = None) -> d.Trial:
        """All K folds reported: the trial is COMPLETED with their mean and spread.
        Completing again under the same lease returns the completed trial unchanged."""
        self.check_agent(lease.agent_id, caller)
        done = self.calls.complete(lease, self.ctx.clock())
        if isinstance(done, Refused):
            raise self._error(done, lease)
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
        self.check_agent(lease.agent_id, caller)
        done = self.calls.release(lease, state, reason, self.ctx.clock())
        if isinstance(done, Refused):
            raise self._error(done, lease)
        return done

    # -- helpers ---------------------------------------------------------------------

    def _expiry(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.ctx.settings.lease_seconds)

    def check_agent(self, agent_id: str, caller: int | None) -> None:
        """NotFound unless the agent is registered; PermissionDenied (with auth on) unless
        by the caller's token."""
        if agent_id in self._tokens:
            token = self._tokens[agent_id]
        else:
            known, token = self.calls.agent_token(agent_id)
            if not known:
                raise NotFound(f"agent {agent_id!r} is not registered (call Register first)")
            self._remember(agent_id, token)
        if caller is not None and token != caller:
            raise PermissionDenied(
                f"agent {agent_id!r} was registered with another token (or before auth was on); "
                "an agent id can be used only with the token that registered it: register again"
            )

    def _remember(self, agent_id: str, token: int | None) -> None:
        with self._lock:
            if len(self._tokens) >= _MAX_CACHED:
                self._tokens.clear()
            self._tokens[agent_id] = token

    def _stop(self, refused: Refused, lease: Lease, fold: int | None = None) -> HeartbeatReply:
        """A heartbeat's or report's answer for a trial stopped under this lease; the
        refusal's error otherwise."""
        if refused.why == Refusal.STOPPED and refused.trial is not None:
            cancelled = refused.trial.state == d.TrialState.CANCELLED
            return HeartbeatReply(Action.CANCELLED if cancelled else Action.PRUNED, None)
        raise self._error(refused, lease, fold=fold)

    def _pruned(
        self, lease: Lease, campaign: d.Campaign, decide: Callable[[SqlHistory, d.Trial], Verdict | None]
    ) -> bool:
        """Asks the pruner on committed data; a trial it stops is pruned if this lease
        still holds it then."""
        with self.ctx.storage.read() as tx:
            trial = tx.trials.get(lease.trial_id)
            if trial is None or trial.state != d.TrialState.RUNNING:
                return False
            verdict = decide(SqlHistory(tx, campaign.id), trial)
        if verdict is None:
            return False
        return self.calls.prune(lease, verdict.value, verdict.reason, self.ctx.clock())

    def _error(
        self,
        refused: Refused,
        lease: Lease,
        *,
        fold: int | None = None,
        metrics: dict[str, float] | None = None,
        kind: str = "",
    ) -> ServiceError:
        """The error that names why a call changed nothing."""
        t, why = refused.trial, refused.why
        if t is None:
            return NotFound(f"trial {lease.trial_id} does not exist")
        campaign = self.calls.campaign(t.campaign_id)
        if why == Refusal.NOT_HOLDER:
            return FailedPrecondition(
                f"trial {t.id} is not held by agent {lease.agent_id} under lease {lease.lease_id!r} "
                f"(it is {t.state.value}, attempt {t.attempt}): the lease expired or was released"
            )
        if why in (Refusal.STOPPED, Refusal.NOT_RUNNING):
            return FailedPrecondition(f"trial {t.id} is {t.state.value}, not RUNNING: nothing more can be reported")
        if why == Refusal.EXPIRED and t.lease_expires_at is not None:
            return FailedPrecondition(
                f"the lease of trial {t.id} expired at {t.lease_expires_at.isoformat()}; "
                "the trial goes back to the queue"
            )
        unit = t.fidelity
        if why == Refusal.FOLD_RANGE and campaign is not None and unit is not None and (fold or 0) < campaign.folds:
            f = unit
            return InvalidArgument(
                f"fold {fold} is not part of this lease: trial {t.id}'s rung {f.rung} trains folds 0..{f.folds - 1} of "
                f"{campaign.folds} (multi-fidelity); the next folds come with a promotion",
                [("fold", f"must be in 0..{f.folds - 1} for this lease")],
            )
        if why == Refusal.FOLD_RANGE and campaign is not None:
            n = campaign.folds
            return InvalidArgument(
                f"fold {fold} does not exist: campaign {campaign.id} has {n} folds (0..{n - 1})",
                [("fold", f"must be in 0..{n - 1}")],
            )
        if why == Refusal.FOLD_FINISHED:
            done = next((f for f in t.folds if f.index == fold and f.finished), None)
            if done is not None and done.attempt == t.attempt and t.lease_id == lease.lease_id:
                return FailedPrecondition(
                    f"fold {fold} of trial {t.id} is already finished with value {done.value}; "
                    "a retry must repeat the same value, metrics and checkpoint"
                )
            return FailedPrecondition(f"fold {fold} of trial {t.id} is already finished")
        if why == Refusal.METRICS_MISSING:
            missing = [str(m) for m in refused.missing]
            return InvalidArgument(
                f"metrics: the campaign's objectives need {missing[0]!r} in every fold's metrics; "
                f"got {sorted(metrics or {})}",
                [("metrics", f"must hold {', '.join(missing)}")],
            )
        if why == Refusal.FOLDS_MISSING and campaign is not None:
            return FailedPrecondition(
                f"trial {t.id} cannot complete: folds {list(refused.missing)} of {campaign.folds} "
                "have no reported value (ReportFold first)"
            )
        if why == Refusal.TOO_MANY_EVENTS:
            return FailedPrecondition(
                f"attempt {t.attempt} of trial {t.id} has {MAX_AGENT_EVENTS} {kind} events already"
            )
        return FailedPrecondition(f"trial {t.id} changed while this call was answered ({why.value}); call again")
