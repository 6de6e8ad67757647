"""Multi-fidelity trials (``algorithm: mf``): the rung a trial trains, its pause
between rungs and its promotion, as the same trial, to the next."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update

from hpcopt_server import domain as d
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store, must


class FidelityStore(Store):
    """A multi-fidelity trial's unit of work and its moves between rungs."""

    def pause(
        self, trial_id: int, fidelity: d.Fidelity, value: float, value_std: float, values: list[float] | None
    ) -> None:
        """A multi-fidelity trial that finished a rung below the top: PAUSED with the
        rung's value, its lease ended (its id kept: a completion retried under it is
        answered with the trial), until it is promoted or stopped."""
        q = update(m.TrialRow).where(m.TrialRow.id == trial_id)
        q = q.values(
            state=d.TrialState.PAUSED,
            value=value,
            value_std=value_std,
            values=values,
            fidelity=fidelity.as_dict(),
            lease_expires_at=None,
        )
        must(self.s.execute(q).rowcount, f"trial {trial_id}")  # type: ignore[attr-defined]
        self._forget(m.TrialRow, trial_id)

    def promote(self, trial_id: int, fidelity: d.Fidelity, agent_id: str, lease_id: str, expires: datetime) -> bool:
        """A PAUSED multi-fidelity trial RUNNING again under a new lease, for the unit of
        work ``fidelity``: its value is cleared (it is the next rung's to give), and where
        the unit has more epochs its folds are open again, their checkpoints kept, so the
        agent resumes each where it stopped. False if it was not PAUSED (or does not
        exist): another replica promoted or stopped it first."""
        q = update(m.TrialRow).where(m.TrialRow.id == trial_id, m.TrialRow.state == d.TrialState.PAUSED)
        q = q.values(
            state=d.TrialState.RUNNING,
            value=None,
            value_std=None,
            values=None,
            fidelity=fidelity.as_dict(),
            agent_id=agent_id,
            lease_id=lease_id,
            lease_expires_at=expires,
            error="",
        )
        if not self.s.execute(q).rowcount:  # type: ignore[attr-defined]
            return False
        before = fidelity.history[-1] if fidelity.history else None
        if before is not None and fidelity.epochs > before.epochs:
            F = m.FoldRow
            self.s.execute(
                update(F)
                .where(F.trial_id == trial_id, F.index < fidelity.folds)
                .values(finished=False)
                .execution_options(synchronize_session=False)
            )
        self._forget(m.TrialRow, trial_id)
        return True

    def record(self, trial_id: int, fidelity: d.Fidelity) -> None:
        """The trial's fidelity as given (its top rung added to its history)."""
        q = update(m.TrialRow).where(m.TrialRow.id == trial_id).values(fidelity=fidelity.as_dict())
        must(self.s.execute(q.execution_options(synchronize_session=False)).rowcount, f"trial {trial_id}")  # type: ignore[attr-defined]
        self._forget(m.TrialRow, trial_id)
