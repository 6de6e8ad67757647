"""Export a campaign as one JSON document, and import such a document as a new campaign.

The document (``format: hpcopt-campaign``, ``version: 1``) holds the spec, the
campaign's state and every trial with its folds, curves and attempt history. Importing
gives new ids; trials that were RUNNING come back QUEUED (their lease died with the
export), so an imported running campaign simply goes on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.campaigns import validate_spec
from hpcopt_server.service.context import Context, campaign_or_404


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FoldDoc(_Doc):
    index: int
    finished: bool
    value: float | None = None
    metrics: dict[str, float] = {}
    checkpoint_uri: str = ""
    attempt: int = 1


class CurveDoc(_Doc):
    fold: int
    step: int
    value: float


class EventDoc(_Doc):
    attempt: int
    kind: str
    agent_id: str = ""
    reason: str = ""
    at: datetime


class TrialDoc(_Doc):
    number: int
    state: d.TrialState
    attempt: int = 1
    params: dict[str, bool | int | float | str]
    value: float | None = None
    value_std: float | None = None
    error: str = ""
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    folds: list[FoldDoc] = []
    curves: list[CurveDoc] = []
    events: list[EventDoc] = []


class CampaignDoc(_Doc):
    id: int | None = None
    name: str
    state: d.CampaignState
    created_at: datetime
    finished_at: datetime | None = None


class ExportDoc(_Doc):
    format: Literal["hpcopt-campaign"]
    version: Literal[1]
    spec: dict[str, Any]
    campaign: CampaignDoc
    trials: list[TrialDoc]


def export_campaign(ctx: Context, campaign_id: int) -> dict[str, Any]:
    with ctx.storage.read() as tx:
        c = campaign_or_404(tx, campaign_id)
        ids = [t.id for t in tx.list_trials(campaign_id, with_folds=False)[0]]
        trials = [tx.get_trial(i, full=True) for i in ids]
    doc = ExportDoc(
        format="hpcopt-campaign",
        version=1,
        spec=c.spec,
        campaign=CampaignDoc(id=c.id, name=c.name, state=c.state, created_at=c.created_at, finished_at=c.finished_at),
        trials=[
            TrialDoc(
                number=t.number,
                state=t.state,
                attempt=t.attempt,
                params=t.params,
                value=t.value,
                value_std=t.value_std,
                error=t.error,
                created_at=t.created_at,
                started_at=t.started_at,
                finished_at=t.finished_at,
                folds=[FoldDoc(**vars(f)) for f in t.folds],
                curves=[CurveDoc(**vars(p)) for p in t.curves],
                events=[EventDoc(**vars(e)) for e in t.events],
            )
            for t in trials
            if t is not None
        ],
    )
    return doc.model_dump(mode="json")


def import_campaign(ctx: Context, document: Any) -> d.Campaign:
    try:
        doc = ExportDoc.model_validate(document)
    except pydantic.ValidationError as exc:
        errors = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors(include_url=False)]
        raise InvalidArgument(
            "invalid export document: " + "; ".join(f"{p}: {m}" for p, m in errors[:10]), errors
        ) from None
    spec = validate_spec(doc.spec)
    numbers = [t.number for t in doc.trials]
    if len(set(numbers)) != len(numbers):
        raise InvalidArgument("invalid export document: trial numbers repeat", [("trials", "numbers must be unique")])
    now = ctx.clock()
    with ctx.storage.write() as tx:
        c = tx.insert_campaign(doc.campaign.name, spec, doc.campaign.created_at)
        ids: dict[int, int] = {}
        for t in sorted(doc.trials, key=lambda t: t.number):
            # RUNNING (and the transient PREEMPTED) come back QUEUED: their lease is gone.
            new = tx.insert_trial(
                c.id,
                t.number,
                t.params,
                t.state if t.state.finished else d.TrialState.QUEUED,
                t.created_at,
                attempt=t.attempt,
                value=t.value,
                value_std=t.value_std,
                error=t.error,
                started_at=t.started_at,
            )
            for f in t.folds:
                tx.upsert_fold(
                    new.id,
                    f.index,
                    now,
                    finished=f.finished,
                    value=f.value,
                    metrics=f.metrics,
                    checkpoint_uri=f.checkpoint_uri,
                    attempt=f.attempt,
                )
            for p in t.curves:
                tx.put_curve_point(new.id, p.fold, p.step, p.value)
            for e in t.events:
                tx.add_event(new.id, e.attempt, e.kind, e.at, agent_id=e.agent_id, reason=e.reason)
            tx.add_event(new.id, t.attempt, "imported", now, reason=f"from campaign {doc.campaign.id}")
            ids[t.number] = new.id
        # Finished trials take their finish_seq in the order they originally finished.
        for t in sorted(doc.trials, key=lambda t: (t.finished_at or now, t.number)):
            if t.state.finished:
                tx.finish_trial(ids[t.number], t.state, t.finished_at or now)
        tx.set_next_trial_number(c.id, max(numbers, default=-1) + 1)
        if doc.campaign.state != d.CampaignState.RUNNING:
            tx.set_campaign_state(c.id, doc.campaign.state, doc.campaign.finished_at or now)
        out = tx.get_campaign(c.id)
    assert out is not None
    return out
