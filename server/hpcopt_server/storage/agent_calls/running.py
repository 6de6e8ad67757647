"""The calls of a running trial: heartbeat, report, a finished fold, an event."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from hpcopt_server import domain as d
from hpcopt_server import rules
from hpcopt_server.rules import Refusal
from hpcopt_server.storage import agent_sql as S
from hpcopt_server.storage.agent_calls.base import (
    CallsBase,
    FoldDone,
    HeldLease,
    Refused,
    Reported,
    Rollback,
    lease_params,
)


class Running(CallsBase):
    def heartbeat(self, lease: HeldLease, now: datetime, expires: datetime) -> Refused | None:
        """Extends the lease to ``expires`` and marks the agent seen; None if it held."""
        p = lease_params(lease, now, expires)
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
        p = {**lease_params(lease, now, expires), "fold": fold, "step": step, "value": value, "ck": checkpoint_uri}
        if self.one_statement:
            with self.storage.db.autocommit() as c:
                row = c.execute(S.PG_REPORT, p).first() if fold >= 0 else None
            campaign = None if row is None else self.campaign(int(row[0]))
            if row is not None and campaign is not None:
                return Reported(campaign, int(row[2]))
            return self._diagnose(lease, now, fold=fold)
        try:
            with self._write() as c:
                campaign, attempt, folds = self._renewed_campaign(c, p)
                if rules.fold_refusal(fold, folds, ()) or not self._open_fold(c, {**p, "attempt": attempt}):
                    raise Rollback
                S.run(c, S.UPSERTS[c.dialect.name, self.returning][2], p)
                return Reported(campaign, int(c.execute(S.CURVE_POINTS, p).scalar() or 0))
        except Rollback:
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
            **lease_params(lease, now, expires),
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
                campaign, attempt, folds = self._renewed_campaign(c, p)
                if rules.fold_refusal(fold, folds, ()) or rules.missing_metrics(campaign.objectives, metrics):
                    raise Rollback
                kept = self._close_fold(c, {**p, "attempt": attempt})
                if kept is None:
                    raise Rollback
                return FoldDone(campaign, d.Fold(fold, True, value, dict(metrics), kept, attempt))
        except Rollback:
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

    def save_analysis(self, lease: HeldLease, fold: int, document: dict[str, Any], now: datetime) -> Refused | None:
        """Stores a fold's analysis under the trial's lease (also once it was stopped:
        the fold it was computed on is finished), or under the lease of an analysis of
        the finished trial asked for after the fact, for a fold of the campaign."""
        with self.storage.write() as tx:
            trial = tx.trials.get(lease.trial_id, lock=True, folds=False)
            why = rules.lease_refusal(trial, lease.agent_id, lease.lease_id, now)
            if why is not None and tx.analyses.holds(lease.trial_id, lease.agent_id, lease.lease_id, now):
                why = None
            if trial is None or why not in (None, Refusal.STOPPED):
                return Refused(why or Refusal.CHANGED, trial)
            campaign = self.campaign(trial.campaign_id, tx.connection())
            bad = None if campaign is None else rules.fold_refusal(fold, campaign.folds, ())
            if bad is not None:
                return Refused(bad, trial)
            tx.analyses.save(trial.id, fold, trial.attempt, document, now)
        return None

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
