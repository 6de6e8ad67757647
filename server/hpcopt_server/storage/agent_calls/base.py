"""What every family of agent calls shares: the typed results, the campaign cache, the
write transaction, lease renewal, the requeue, and the diagnosis of a refused call."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.rules import Refusal
from hpcopt_server.storage import agent_sql as S
from hpcopt_server.storage import mapping
from hpcopt_server.storage.repository import Storage, Tx

_MAX_CACHED = 100_000


class Wording(Protocol):
    """What the calls write for a reader (a trial's error, a pause reason), given the
    facts they read in the transaction. The service provides it
    (``service/wording.py``): storage records the words, it does not choose them."""

    def pruned_by_agent(self, reason: str, last: d.CurvePoint | None, others: Sequence[float]) -> str:
        """A trial its agent pruned: its reason, its last point and the completed
        trials' values there."""
        ...

    def paused_for_failures(self, campaign_id: int, n: int, signature: str, now: datetime) -> str:
        """A campaign paused because its last ``n`` trials failed the same way."""
        ...


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


log = logging.getLogger("hpcopt_server.storage.agent_calls")


class Rollback(Exception):
    pass


def lease_params(lease: HeldLease, now: datetime, expires: datetime) -> dict[str, Any]:
    return {"tid": lease.trial_id, "lid": lease.lease_id, "aid": lease.agent_id, "now": now, "exp": expires}


def event_params(
    trial_id: int, attempt: int, kind: str, agent_id: str, now: datetime, reason: str = ""
) -> dict[str, Any]:
    return {"tid": trial_id, "attempt": attempt, "kind": kind, "aid": agent_id, "now": now, "reason": reason}


def holds(trial: d.Trial, lease: HeldLease) -> bool:
    return trial.lease_id == lease.lease_id and trial.agent_id == lease.agent_id


class CallsBase:
    """The state and helpers every family of calls uses."""

    def __init__(self, storage: Storage, wording: Wording):
        self.storage = storage
        self.wording = wording
        self.returning = storage.returning
        self.one_statement = storage.dialect == "postgresql"
        self._campaigns: dict[int, d.Campaign] = {}
        self._lock = threading.Lock()

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

    def forget_campaign(self, campaign_id: int) -> None:
        """Drops the cached campaign: its space grew (``service/growing.py``, in process)."""
        with self._lock:
            self._campaigns.pop(campaign_id, None)

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

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction's connection, committed on success."""
        with self.storage.write() as tx:
            yield tx.connection()

    def _renew(self, c: Connection, p: dict[str, Any]) -> tuple[int, int, int | None] | None:
        """Extends a held lease: (campaign id, attempt, the folds of its multi-fidelity
        unit or None), or None when the lease does not hold."""
        if self.returning:
            row = S.run(c, S.RENEW, p).first()
        else:
            row = c.execute(S.OF_TRIAL, p).first() if S.run(c, S.RENEW_PLAIN, p).rowcount else None
        if not row:
            return None
        unit = row[2].get("folds") if isinstance(row[2], dict) else None
        return int(row[0]), int(row[1]), None if unit is None else int(unit)

    def _renewed_campaign(self, c: Connection, p: dict[str, Any]) -> tuple[d.Campaign, int, int]:
        """The renewed lease's campaign, attempt, and the folds the lease may report
        (``rules.unit_folds``); Rollback when it does not hold."""
        renewed = self._renew(c, p)
        campaign = None if renewed is None else self.campaign(renewed[0], c)
        if renewed is None or campaign is None:
            raise Rollback
        return campaign, renewed[1], rules.unit_folds(renewed[2], campaign.folds)

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
            folds = rules.unit_folds(trial.fidelity.folds if trial.fidelity else None, campaign.folds)
            why = rules.fold_refusal(fold, folds, (f.index for f in trial.folds if f.finished))
        return Refused(why or Refusal.CHANGED, trial)

    def _diagnose_fold(
        self, lease: HeldLease, now: datetime, fold: int, value: float, metrics: dict[str, float], checkpoint_uri: str
    ) -> FoldDone | Refused:
        trial, campaign = self._read(lease.trial_id)
        done = None if trial is None else next((f for f in trial.folds if f.index == fold and f.finished), None)
        if trial is not None and campaign is not None and done is not None and holds(trial, lease):
            # Finished under this attempt: a retry with the same content answers as the first call did.
            same = done.value == value and done.metrics == metrics and checkpoint_uri in ("", done.checkpoint_uri)
            if done.attempt == trial.attempt:
                return FoldDone(campaign, done, replayed=True) if same else Refused(Refusal.FOLD_FINISHED, trial)
        why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
        if why is None and trial is not None and campaign is not None:
            folds = rules.unit_folds(trial.fidelity.folds if trial.fidelity else None, campaign.folds)
            why = rules.fold_refusal(fold, folds, (f.index for f in trial.folds if f.finished))
            missing = rules.missing_metrics(campaign.objectives, metrics)
            if why is None and missing:
                return Refused(Refusal.METRICS_MISSING, trial, tuple(missing))
        return Refused(why or Refusal.CHANGED, trial)
