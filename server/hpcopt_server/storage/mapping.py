"""The one place where ORM rows become domain objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.storage import models as m

# Each function takes an ORM row or a Core row of the same table (the same attribute names).


def campaign(row: m.CampaignRow | Any) -> d.Campaign:
    return d.Campaign(
        id=row.id,
        name=row.name,
        state=d.CampaignState(row.state),
        spec=row.spec,
        created_at=row.created_at,
        finished_at=row.finished_at,
        trials_created=row.next_number,
        trials_finished=row.finished_count,
        owner=row.owner,
        pause_reason=row.pause_reason,
    )


def fold(row: m.FoldRow) -> d.Fold:
    return d.Fold(
        index=row.index,
        finished=row.finished,
        value=row.value,
        metrics={k: float(v) for k, v in (row.metrics or {}).items()},
        checkpoint_uri=row.checkpoint_uri,
        attempt=row.attempt,
    )


def _lineage(data: Any) -> d.Lineage | None:
    return None if data is None else d.Lineage.from_dict(dict(data))


def _fidelity(data: Any) -> d.Fidelity | None:
    return None if data is None else d.Fidelity.from_dict(dict(data))


def trial(
    row: m.TrialRow | Any,
    folds: list[m.FoldRow] | None = None,
    curves: list[m.CurveRow] | None = None,
    events: list[m.TrialEventRow] | None = None,
) -> d.Trial:
    return d.Trial(
        id=row.id,
        campaign_id=row.campaign_id,
        number=row.number,
        state=d.TrialState(row.state),
        attempt=row.attempt,
        params=dict(row.params),
        created_at=row.created_at,
        value=row.value,
        value_std=row.value_std,
        values=None if row.values is None else tuple(float(v) for v in row.values),
        agent_id=row.agent_id,
        lease_id=row.lease_id,
        lease_expires_at=row.lease_expires_at,
        error=row.error,
        started_at=row.started_at,
        finished_at=row.finished_at,
        finish_seq=row.finish_seq,
        lineage=_lineage(getattr(row, "lineage", None)),
        fidelity=_fidelity(getattr(row, "fidelity", None)),
        constraint_values=_constraint_values(getattr(row, "constraint_values", None)),
        violation=getattr(row, "violation", None),
        broken=getattr(row, "broken", "") or "",
        folds=tuple(fold(f) for f in sorted(folds or [], key=lambda f: f.index)),
        curves=tuple(
            d.CurvePoint(fold=c.fold, step=c.step, value=c.value)
            for c in sorted(curves or [], key=lambda c: (c.fold, c.step))
        ),
        events=tuple(
            d.TrialEvent(attempt=e.attempt, kind=e.kind, agent_id=e.agent_id, reason=e.reason, at=e.at)
            for e in sorted(events or [], key=lambda e: e.id)
        ),
    )


def _constraint_values(raw: Any) -> tuple[float | None, ...] | None:
    return None if raw is None else tuple(None if v is None else float(v) for v in raw)


def agent(row: m.AgentRow) -> d.Agent:
    return d.Agent(
        id=row.id,
        host=row.host,
        ranks=row.ranks,
        gpus=row.gpus,
        slurm_job_id=row.slurm_job_id,
        campaign_id=row.campaign_id,
        pid=row.pid,
        version=row.version,
        registered_at=row.registered_at,
        last_seen_at=row.last_seen_at,
        token_id=row.token_id,
        exited_at=row.exited_at,
        exit_reason=row.exit_reason or "",
    )


def token(row: m.ApiTokenRow) -> d.ApiToken:
    return d.ApiToken(
        id=row.id,
        name=row.name,
        scopes=frozenset(s for s in row.scopes.split(",") if s),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def trial_with_folds(rows: Sequence[Any]) -> d.Trial | None:
    """A trial from the rows of its outer join with its folds (``agent_sql.TRIAL_WITH_FOLDS``)."""
    if not rows:
        return None
    folds = tuple(
        d.Fold(
            index=r.fold,
            finished=bool(r.finished),
            value=r.fold_value,
            metrics={k: float(v) for k, v in (r.metrics or {}).items()},
            checkpoint_uri=r.checkpoint_uri,
            attempt=r.fold_attempt,
        )
        for r in sorted(rows, key=lambda r: r.fold if r.fold is not None else -1)
        if r.fold is not None
    )
    return replace(trial(rows[0]), folds=folds)
