"""The agent calls' one writer: acquire, heartbeat, report, fold, complete, release, and
the requeue that an expired lease or an exiting agent causes.

Each call is one method with a typed result: what it changed, or :class:`Refused`
naming why it changed nothing. How a call reaches the database is decided here and
nowhere else:

- PostgreSQL answers a heartbeat, a report, a finished fold or a completion (after an
  unlocked read of the folds) in one statement that commits by itself, its guards in
  its WHERE (``agent_sql.PG_*``);
- SQLite runs the same guards as a few lean statements in one write transaction; one
  before 3.35, which has no ``RETURNING``, reads what a statement changed with a
  ``SELECT`` in that transaction (SQLite has one writer, so nothing changes between);
- when a guarded statement matches nothing, :meth:`AgentCalls._diagnose` reads the
  trial (read-only) and applies ``hpcopt_server.rules`` to name the reason: an expired
  lease, another agent's lease, a finished trial or fold, a replayed report (which is
  answered as the first was).

Lock order, as for every writer: the campaign row, then the trial row. Heartbeats,
reports and folds lock their trial row only. Campaign specs never change, so they are
cached per process.
"""

from __future__ import annotations

import logging
import statistics
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.failures import digest
from hpcopt_server.rules import Refusal
from hpcopt_server.storage import agent_sql as S
from hpcopt_server.storage import mapping
from hpcopt_server.storage.repository import Storage, Tx

_MAX_CACHED = 100_000


class HeldLease(Protocol):
    @property
    def agent_id(self) -> str: ...
    @property
    def trial_id(self) -> int: ...
    @property
    def lease_id(self) -> str: ...


@dataclass(frozen=True)
class Refused:
    """Nothing changed, because of ``why``; ``trial`` as the diagnosis read it (with its
    folds), ``missing`` the fold indices or metric names a completion or a fold lacks."""

    why: Refusal
    trial: d.Trial | None = None
    missing: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Reported:
    campaign: d.Campaign
    points: int
    """The fold's learning-curve points now."""


@dataclass(frozen=True)
class FoldDone:
    campaign: d.Campaign
    fold: d.Fold
    replayed: bool = False
    """A retry of a report already stored: nothing changed."""


#: What a waiting acquisition gets when no trial can start now (PAUSED: because the
#: campaign is paused), or none will again.
WAIT, PAUSED, DONE = "WAIT", "PAUSED", "DONE"
#: (tx, campaign, n, active) -> at most n suggestions: an optimizer may have fewer ready
#: (PBT waits for its members' reports); the agents left over get WAIT.
Suggest = Callable[[Tx, d.Campaign, int, int], list[d.Suggestion]]
"""(tx, campaign with fresh counters, n, trials active) -> n parameter sets."""

log = logging.getLogger(__name__)


class _Rollback(Exception):
    pass


class AgentCalls:
    def __init__(self, storage: Storage):
        self.storage = storage
        self.returning = storage.returning
        self.one_statement = storage.dialect == "postgresql"
        self._campaigns: dict[int, d.Campaign] = {}
        self._lock = threading.Lock()

    # -- while a trial runs ------------------------------------------------------------

    def heartbeat(self, lease: HeldLease, now: datetime, expires: datetime) -> Refused | None:
        """Extends the lease to ``expires`` and marks the agent seen; None if it held."""
        p = _lease_params(lease, now, expires)
        if self.one_statement:
            with self.storage.db.autocommit() as c:
                held = bool(c.execute(S.PG_HEARTBEAT, p).scalar())
        else:
            with self._write() as c:
                held = self._renew(c, p) is not None
                if held:
                    S.run(c, S.SEEN, p)
        return None if held else self._diagnose(lease, now)

    def report(
        self,
        lease: HeldLease,
        fold: int,
        step: int,
        value: float,
        checkpoint_uri: str,
        now: datetime,
        expires: datetime,
    ) -> Reported | Refused:
        """Stores one learning-curve point of an open fold (a repeated step replaces its
        value), opens the fold under this attempt, extends the lease."""
        p = {**_lease_params(lease, now, expires), "fold": fold, "step": step, "value": value, "ck": checkpoint_uri}
        if self.one_statement:
            with self.storage.db.autocommit() as c:
                row = c.execute(S.PG_REPORT, p).first() if fold >= 0 else None
            campaign = None if row is None else self.campaign(int(row[0]))
            if row is not None and campaign is not None:
                return Reported(campaign, int(row[2]))
            return self._diagnose(lease, now, fold=fold)
        try:
            with self._write() as c:
                campaign, attempt = self._renewed_campaign(c, p)
                if rules.fold_refusal(fold, campaign.folds, ()) or not self._open_fold(c, {**p, "attempt": attempt}):
                    raise _Rollback
                S.run(c, S.UPSERTS[c.dialect.name, self.returning][2], p)
                return Reported(campaign, int(c.execute(S.CURVE_POINTS, p).scalar() or 0))
        except _Rollback:
            return self._diagnose(lease, now, fold=fold)

    def finish_fold(
        self,
        lease: HeldLease,
        fold: int,
        value: float,
        metrics: dict[str, float],
        checkpoint_uri: str,
        now: datetime,
        expires: datetime,
    ) -> FoldDone | Refused:
        """Marks an open fold finished with its value and metrics (which must hold every
        objective after the first), extends the lease. A retry with the same content
        answers as the first call did."""
        p = {
            **_lease_params(lease, now, expires),
            "fold": fold,
            "value": value,
            "metrics": metrics,
            "ck": checkpoint_uri,
        }
        if self.one_statement:
            with self.storage.db.autocommit() as c:
                row = c.execute(S.PG_FOLD, p).first() if fold >= 0 else None
            campaign = None if row is None else self.campaign(int(row[0]))
            if row is not None and campaign is not None:
                return FoldDone(campaign, d.Fold(fold, True, value, dict(metrics), str(row[2]), int(row[1])))
            return self._diagnose_fold(lease, now, fold, value, metrics, checkpoint_uri)
        try:
            with self._write() as c:
                campaign, attempt = self._renewed_campaign(c, p)
                if rules.fold_refusal(fold, campaign.folds, ()) or rules.missing_metrics(campaign.objectives, metrics):
                    raise _Rollback
                kept = self._close_fold(c, {**p, "attempt": attempt})
                if kept is None:
                    raise _Rollback
                return FoldDone(campaign, d.Fold(fold, True, value, dict(metrics), kept, attempt))
        except _Rollback:
            return self._diagnose_fold(lease, now, fold, value, metrics, checkpoint_uri)

    def add_event(self, lease: HeldLease, kind: str, reason: str, now: datetime, limit: int) -> Refused | None:
        """Adds an event to the leased trial's log (also once it was stopped), at most
        ``limit`` of one kind per attempt."""
        with self.storage.write() as tx:
            trial = tx.trials.get(lease.trial_id, lock=True, folds=False)
            why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
            if trial is None or why not in (None, Refusal.STOPPED):
                return Refused(why or Refusal.CHANGED, trial)
            p = {"tid": trial.id, "attempt": trial.attempt, "kind": kind}
            if int(tx.connection().execute(S.COUNT_EVENTS, p).scalar() or 0) >= limit:
                return Refused(Refusal.TOO_MANY_EVENTS, trial)
            tx.trials.add_event(trial.id, trial.attempt, kind, now, agent_id=lease.agent_id, reason=reason)
        return None

    # -- the ends of an attempt --------------------------------------------------------

    def acquire(
        self, campaign_id: int, agents: Sequence[str], now: datetime, expires: datetime, suggest: Suggest
    ) -> list[d.Trial | str] | None:
        """A trial for each of ``agents`` (RUNNING under a new lease, in its
        ``lease_id``), or WAIT (PAUSED: the campaign is paused) or DONE, in one
        transaction under the campaign's lock:
        queued trials resume first (rules.room_to_acquire). None if there is no such
        campaign."""
        with self.storage.write() as tx:
            c = tx.connection()
            campaign = self.campaign(campaign_id, c)
            if campaign is None:
                return None
            asking = len(agents)
            # The campaign lock, to the commit.
            state, first, finished, budget = self._take_numbers(c, campaign_id, asking)
            if budget != campaign.spec.get("budget"):  # raised since it was cached
                campaign = self._reload(c, campaign_id)
            running, queued = (int(n or 0) for n in c.execute(S.ACTIVE, {"cid": campaign_id}).one())
            if state != d.CampaignState.RUNNING:
                c.execute(S.SET_NEXT_NUMBER, {"cid": campaign_id, "n": first})
                return [PAUSED if state == d.CampaignState.PAUSED else DONE] * asking
            room = rules.room_to_acquire(
                asking=asking,
                running=running,
                queued=queued,
                created=first,
                max_parallel=campaign.max_parallel,
                max_trials=campaign.max_trials,
            )
            queued_ids = self._queued(c, campaign_id, room.resume)
            out: list[d.Trial | str] = [
                self._resume(tx, tid, a, now, expires)
                for tid, a in zip(queued_ids, agents[: len(queued_ids)], strict=True)
            ]
            made: list[d.Suggestion] = []
            if room.new:
                fresh = replace(campaign, trials_created=first, trials_finished=finished)
                made = suggest(tx, fresh, room.new, running + room.resume)[: room.new]
                chosen = list(agents[room.resume : room.resume + len(made)])
                if made:  # an empty executemany is one execution without parameters
                    out += self._insert_running(c, campaign, first, made, chosen, now, expires)
            if len(made) < asking:
                c.execute(S.SET_NEXT_NUMBER, {"cid": campaign_id, "n": first + len(made)})
            out += [WAIT] * (asking - len(out))
            c.execute(S.SEEN_MANY, {"aids": sorted(set(agents)), "now": now})
        return out

    def complete(self, lease: HeldLease, now: datetime) -> d.Trial | Refused:
        """RUNNING -> COMPLETED with the mean and spread of its folds (rules.fold_summary);
        completing again under the same lease answers with the completed trial."""
        try:
            return self._complete_one(lease, now) if self.one_statement else self._complete_tx(lease, now)
        except _Rollback:
            pass
        trial, campaign = self._read(lease.trial_id)
        if trial is not None and trial.state == d.TrialState.COMPLETED and _holds(trial, lease):
            return trial  # a retry whose first reply was lost
        why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
        if why is not None or trial is None or campaign is None:
            return Refused(why or Refusal.NO_CAMPAIGN, trial)
        summary = rules.fold_summary(trial.folds, campaign.folds, campaign.objectives)
        if not isinstance(summary, rules.FoldSummary):
            return Refused(Refusal.FOLDS_MISSING, trial, tuple(summary))
        return Refused(Refusal.CHANGED, trial)

    def _summary(
        self, trial: d.Trial | None, campaign: d.Campaign | None, lease: HeldLease, now: datetime
    ) -> rules.FoldSummary:
        if trial is None or campaign is None or rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now):
            raise _Rollback
        summary = rules.fold_summary(trial.folds, campaign.folds, campaign.objectives)
        if not isinstance(summary, rules.FoldSummary):
            raise _Rollback
        return summary

    def _complete_one(self, lease: HeldLease, now: datetime) -> d.Trial:
        """PostgreSQL: an unlocked read of the folds, then the completion in one statement
        (``agent_sql.PG_COMPLETE``): the campaign's lock is held for that statement only."""
        with self.storage.db.autocommit() as c:
            trial = self._trial_with_folds(c, lease.trial_id)
            campaign = None if trial is None else self.campaign(trial.campaign_id, c)
            summary = self._summary(trial, campaign, lease, now)
            assert trial is not None and campaign is not None
            p = {
                **_lease_params(lease, now, now),
                "cid": campaign.id,
                "value": summary.value,
                "std": summary.std,
                "values": summary.values,
            }
            seq = self.storage.finishing.complete_alone(c, p)
        if seq is None:
            raise _Rollback
        return _completed(trial, summary, now, seq)

    def _complete_tx(self, lease: HeldLease, now: datetime) -> d.Trial:
        p = _lease_params(lease, now, now)
        with self.storage.write() as tx:
            c = tx.connection()
            trial = self._trial_with_folds(c, lease.trial_id)
            campaign = None if trial is None else self.campaign(trial.campaign_id, c)
            summary = self._summary(trial, campaign, lease, now)
            assert trial is not None and campaign is not None
            # The campaign's lock is held from here to the commit.
            done = {
                "cid": campaign.id,
                "now2": now,
                "value": summary.value,
                "std": summary.std,
                "values": summary.values,
            }
            taken = self.storage.finishing.complete(c, {**p, **done})
            if taken is None:
                raise _Rollback
            seq, state, max_trials = taken
            c.execute(S.EVENT, _event(trial.id, trial.attempt, "completed", lease.agent_id, now))
            if rules.campaign_done(d.CampaignState(state), seq, max_trials):
                tx.campaigns.set_state(campaign.id, d.CampaignState.COMPLETED, now)
            return _completed(trial, summary, now, seq)

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
                said = reason or "pruned by its agent (no reason given)"
                if last is not None:
                    # The reference a reader judges it by: the median pruner's, at that point.
                    done = (d.TrialState.COMPLETED,)
                    others = [
                        v
                        for i, v in tx.results.values_at(campaign.id, last.fold, last.step, done).items()
                        if i != trial.id
                    ]
                    median = ""
                    if others:
                        median = (
                            f"; the median of the {len(others)} completed trials there: {statistics.median(others):.4g}"
                        )
                    said += f" (at fold {last.fold}, epoch {last.step}: {last.value:.4g}{median})"
                tx.trials.finish(trial.id, state, now, value=last.value if last else None, error=said)
            else:
                failure = digest(reason or "failed (no reason given)")
                tx.trials.finish(trial.id, state, now, error=failure.summary, failure=failure.signature)
                _pause_if_repeating(tx, campaign, failure.signature, now)
            self._finish_campaign_if_done(tx, campaign.id, now)
            out = tx.trials.get(trial.id)
        assert out is not None
        return out

    def prune(self, lease: HeldLease, value: float, reason: str, now: datetime) -> bool:
        """RUNNING -> PRUNED with the value it reached, if ``lease`` still holds it."""
        with self.storage.write() as tx:
            campaign, trial = self._lock_trial(tx, lease.trial_id)
            if campaign is None or trial is None or trial.state != d.TrialState.RUNNING or not _holds(trial, lease):
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

    # -- reads -------------------------------------------------------------------------

    def campaign(self, campaign_id: int, c: Connection | None = None) -> d.Campaign | None:
        """The campaign as created (its spec; counters and state are not kept fresh)."""
        found = self._campaigns.get(campaign_id)
        if found is None:
            if c is None:
                with self.storage.read() as tx:
                    row = tx.connection().execute(S.CAMPAIGN, {"cid": campaign_id}).first()
            else:
                row = c.execute(S.CAMPAIGN, {"cid": campaign_id}).first()
            if row is None:
                return None
            found = mapping.campaign(row)
            with self._lock:
                if len(self._campaigns) >= _MAX_CACHED:
                    self._campaigns.clear()
                self._campaigns[campaign_id] = found
        return found

    def _reload(self, c: Connection, campaign_id: int) -> d.Campaign:
        """The campaign read again, and cached in place of the spec it replaces."""
        found = mapping.campaign(c.execute(S.CAMPAIGN, {"cid": campaign_id}).one())
        with self._lock:
            self._campaigns[campaign_id] = found
        return found

    def agent_token(self, agent_id: str) -> tuple[bool, int | None]:
        """(registered?, the id of the token that registered it)."""
        with self.storage.read() as tx:
            row = tx.connection().execute(S.AGENT_TOKEN, {"aid": agent_id}).first()
        return (False, None) if row is None else (True, row[0])

    # -- inside -------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction's connection, committed on success."""
        with self.storage.write() as tx:
            yield tx.connection()

    def _renew(self, c: Connection, p: dict[str, Any]) -> tuple[int, int] | None:
        if self.returning:
            row = S.run(c, S.RENEW, p).first()
        else:
            row = c.execute(S.OF_TRIAL, p).first() if S.run(c, S.RENEW_PLAIN, p).rowcount else None
        return (int(row[0]), int(row[1])) if row else None

    def _renewed_campaign(self, c: Connection, p: dict[str, Any]) -> tuple[d.Campaign, int]:
        renewed = self._renew(c, p)
        campaign = None if renewed is None else self.campaign(renewed[0], c)
        if renewed is None or campaign is None:
            raise _Rollback
        return campaign, renewed[1]

    def _open_fold(self, c: Connection, p: dict[str, Any]) -> bool:
        """Creates or touches an unfinished fold row; False if it is finished."""
        q = S.UPSERTS[c.dialect.name, self.returning][0]
        p = {**p, "metrics": {}}
        if self.returning:
            return S.run(c, q, p).first() is not None
        if c.execute(S.FOLD_FINISHED, p).scalar():
            return False
        S.run(c, q, p)
        return True

    def _close_fold(self, c: Connection, p: dict[str, Any]) -> str | None:
        """Finishes an unfinished fold: its checkpoint URI (given or kept); None if it
        was finished."""
        q = S.UPSERTS[c.dialect.name, self.returning][1]
        if self.returning:
            row = S.run(c, q, p).first()
            return None if row is None else str(row[0])
        if c.execute(S.FOLD_FINISHED, p).scalar():
            return None
        S.run(c, q, p)
        return str(c.execute(S.FOLD_CHECKPOINT, p).scalar())

    def _take_numbers(self, c: Connection, campaign_id: int, k: int) -> tuple[str, int, int, Any]:
        """Takes the campaign's row lock and the next ``k`` trial numbers: (state, the
        first number, trials finished, the spec's budget now)."""
        p = {"cid": campaign_id, "k": k}
        if self.returning:
            row = S.run(c, S.TAKE_NUMBERS, p).one()
        else:
            S.run(c, S.TAKE_NUMBERS_PLAIN, p)
            row = c.execute(S.NUMBERS, p).one()
        return str(row[0]), int(row[1]) - k, int(row[2]), row[3]

    def _queued(self, c: Connection, campaign_id: int, k: int) -> list[int]:
        return [int(r[0]) for r in c.execute(S.QUEUED_IDS, {"cid": campaign_id, "k": k})] if k else []

    def _resume(self, tx: Tx, trial_id: int, agent_id: str, now: datetime, expires: datetime) -> d.Trial:
        c = tx.connection()
        lease_id = uuid.uuid4().hex
        c.execute(S.RESUME, {"tid": trial_id, "aid": agent_id, "lid": lease_id, "exp": expires, "now": now})
        trial = self._trial_with_folds(c, trial_id)
        assert trial is not None
        c.execute(S.EVENT, _event(trial_id, trial.attempt, "acquired", agent_id, now))
        return trial

    def _insert_running(
        self,
        c: Connection,
        campaign: d.Campaign,
        first: int,
        made: list[d.Suggestion],
        agents: list[str],
        now: datetime,
        expires: datetime,
    ) -> list[d.Trial]:
        new = [
            d.Trial(
                id=0,
                campaign_id=campaign.id,
                number=first + i,
                state=d.TrialState.RUNNING,
                attempt=1,
                params=campaign.in_space_order(m.params),
                created_at=now,
                agent_id=a,
                lease_id=uuid.uuid4().hex,
                lease_expires_at=expires,
                started_at=now,
                lineage=m.lineage,
            )
            for i, (m, a) in enumerate(zip(made, agents, strict=True))
        ]
        rows = [
            {
                "cid": campaign.id,
                "number": t.number,
                "params": t.params,
                "aid": t.agent_id,
                "lid": t.lease_id,
                "exp": expires,
                "now": now,
                "lineage": None if t.lineage is None else t.lineage.as_dict(),
            }
            for t in new
        ]
        if self.returning:
            ids = [int(r[0]) for r in c.execute(S.NEW_TRIALS, rows)]
        else:
            ids = [int(c.execute(S.NEW_TRIAL, r).inserted_primary_key[0]) for r in rows]  # type: ignore[index]
        c.execute(S.EVENT, [_event(tid, 1, "acquired", t.agent_id, now) for tid, t in zip(ids, new, strict=True)])
        return [replace(t, id=tid) for tid, t in zip(ids, new, strict=True)]

    def _trial_with_folds(self, c: Connection, trial_id: int) -> d.Trial | None:
        return mapping.trial_with_folds(list(c.execute(S.TRIAL_WITH_FOLDS, {"tid": trial_id})))

    def _read(self, trial_id: int) -> tuple[d.Trial | None, d.Campaign | None]:
        with self.storage.read() as tx:
            c = tx.connection()
            trial = self._trial_with_folds(c, trial_id)
            return trial, None if trial is None else self.campaign(trial.campaign_id, c)

    def _lock_trial(self, tx: Tx, trial_id: int) -> tuple[d.Campaign | None, d.Trial | None]:
        """The trial's campaign and the trial, row-locked in that order (the lock order)."""
        found = tx.trials.get(trial_id, folds=False)
        if found is None:
            return None, None
        return tx.campaigns.lock(found.campaign_id), tx.trials.get(trial_id, lock=True, folds=False)

    def _requeue(self, tx: Tx, campaign: d.Campaign, trial: d.Trial, now: datetime, why: str) -> None:
        """A trial that lost its agent: QUEUED as attempt + 1 (folds, curves and
        checkpoint URIs kept), or FAILED after ``max_attempts``."""
        if rules.requeued_or_failed(trial.attempt, campaign.max_attempts) == d.TrialState.FAILED:
            error = f"{why} on attempt {trial.attempt} of {campaign.max_attempts}"
            tx.trials.finish(trial.id, d.TrialState.FAILED, now, error=error, lease_id="")
            tx.trials.add_event(trial.id, trial.attempt, "failed", now, reason=f"max_attempts reached: {why}")
        else:
            tx.trials.requeue(trial.id, trial.attempt + 1)

    @staticmethod
    def _finish_campaign_if_done(tx: Tx, campaign_id: int, now: datetime) -> None:
        current = tx.campaigns.get(campaign_id)
        if current is not None and rules.campaign_done(current.state, current.trials_finished, current.max_trials):
            tx.campaigns.set_state(campaign_id, d.CampaignState.COMPLETED, now)

    def _diagnose(self, lease: HeldLease, now: datetime, *, fold: int | None = None) -> Refused:
        """Why a guarded heartbeat or report matched nothing, from a read of the trial."""
        trial, campaign = self._read(lease.trial_id)
        why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
        if why is None and fold is not None and campaign is not None and trial is not None:
            why = rules.fold_refusal(fold, campaign.folds, (f.index for f in trial.folds if f.finished))
        return Refused(why or Refusal.CHANGED, trial)

    def _diagnose_fold(
        self, lease: HeldLease, now: datetime, fold: int, value: float, metrics: dict[str, float], checkpoint_uri: str
    ) -> FoldDone | Refused:
        trial, campaign = self._read(lease.trial_id)
        done = None if trial is None else next((f for f in trial.folds if f.index == fold and f.finished), None)
        if trial is not None and campaign is not None and done is not None and _holds(trial, lease):
            # Finished under this attempt: a retry with the same content answers as the first call did.
            same = done.value == value and done.metrics == metrics and checkpoint_uri in ("", done.checkpoint_uri)
            if done.attempt == trial.attempt:
                return FoldDone(campaign, done, replayed=True) if same else Refused(Refusal.FOLD_FINISHED, trial)
        why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
        if why is None and trial is not None and campaign is not None:
            why = rules.fold_refusal(fold, campaign.folds, (f.index for f in trial.folds if f.finished))
            missing = rules.missing_metrics(campaign.objectives, metrics)
            if why is None and missing:
                return Refused(Refusal.METRICS_MISSING, trial, tuple(missing))
        return Refused(why or Refusal.CHANGED, trial)


def _pause_if_repeating(tx: Tx, campaign: d.Campaign, signature: str, now: datetime) -> None:
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
    why = (
        f"{n} trials in a row failed the same way ({signature}); paused at {now.isoformat(timespec='seconds')} so the "
        f"rest of the budget is not spent on it. Fix the task, then `hpcopt resume {campaign.id}` (or Resume in the "
        "dashboard); the trials' errors and events hold the tracebacks"
    )
    tx.campaigns.set_state(campaign.id, d.CampaignState.PAUSED, None)
    tx.campaigns.set_pause_reason(campaign.id, why)
    log.warning("campaign %d paused: %s", campaign.id, why)


def _lease_params(lease: HeldLease, now: datetime, expires: datetime) -> dict[str, Any]:
    return {"tid": lease.trial_id, "lid": lease.lease_id, "aid": lease.agent_id, "now": now, "exp": expires}


def _event(trial_id: int, attempt: int, kind: str, agent_id: str, now: datetime, reason: str = "") -> dict[str, Any]:
    return {"tid": trial_id, "attempt": attempt, "kind": kind, "aid": agent_id, "now": now, "reason": reason}


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
    )


def _holds(trial: d.Trial, lease: HeldLease) -> bool:
    return trial.lease_id == lease.lease_id and trial.agent_id == lease.agent_id
