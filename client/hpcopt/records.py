"""Typed, plain-Python views of the wire messages: what ``hpcopt.Client.trials`` yields,
what the CLI prints as text and as ``--json`` (one shape for both, see the README's
"JSON output"), with parameters always in the order of the campaign's space.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from hpcopt.v1 import common_pb2

ParamValue = bool | int | float | str


def _time(msg: Any, name: str) -> datetime | None:
    return getattr(msg, name).ToDatetime(tzinfo=UTC) if msg.HasField(name) else None


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def ordered_params(trial: common_pb2.Trial, order: Iterable[str] = ()) -> dict[str, ParamValue]:
    """A trial's params as Python values, in ``order`` (the spec's space), then any
    others by name: a protobuf map has no order of its own."""
    values: dict[str, ParamValue] = {}
    for name, v in trial.params.items():
        kind = v.WhichOneof("kind")
        values[name] = getattr(v, kind) if kind else ""
    out = {k: values[k] for k in order if k in values}
    out.update((k, values[k]) for k in sorted(values) if k not in out)
    return out


def space_order(campaign: common_pb2.Campaign) -> list[str]:
    """The parameter names of a campaign's space, in the spec's order."""
    return list(json.loads(campaign.spec_json)["space"]) if campaign.spec_json else []


@dataclass(frozen=True)
class Campaign:
    id: int
    name: str
    state: str  # RUNNING, COMPLETED, CANCELLED
    algorithm: str
    metric: str
    direction: str
    max_trials: int
    finished: int  # trials in a final state (COMPLETED, PRUNED, FAILED, CANCELLED)
    trial_counts: dict[str, int]
    best_value: float | None
    best_trial_id: int | None
    best_trial_number: int | None
    created_at: datetime | None
    finished_at: datetime | None
    spec: dict[str, Any] | None  # None in listings

    @classmethod
    def from_proto(cls, c: common_pb2.Campaign) -> Campaign:
        counts = {k: int(v) for k, v in sorted(c.trial_counts.items())}
        return cls(
            id=int(c.id),
            name=c.name,
            state=common_pb2.CampaignState.Name(c.state).removeprefix("CAMPAIGN_STATE_"),
            algorithm=c.algorithm,
            metric=c.metric,
            direction=c.direction,
            max_trials=int(c.max_trials),
            finished=sum(n for s, n in counts.items() if s not in ("QUEUED", "RUNNING", "PREEMPTED")),
            trial_counts=counts,
            best_value=_opt(c, "best_value"),
            best_trial_id=_opt(c, "best_trial_id"),
            best_trial_number=_opt(c, "best_trial_number"),
            created_at=_time(c, "created_at"),
            finished_at=_time(c, "finished_at"),
            spec=json.loads(c.spec_json) if c.spec_json else None,
        )

    @property
    def folds(self) -> int:
        return int((self.spec or {}).get("folds", 1))

    @property
    def objectives(self) -> list[str]:
        """The metric of each objective (one for a single-objective campaign)."""
        listed = (self.spec or {}).get("objectives") or [{"metric": self.metric}]
        return [str(o["metric"]) for o in listed]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = _jsonable(asdict(self))
        return out


@dataclass(frozen=True)
class Fold:
    index: int
    finished: bool
    value: float | None
    metrics: dict[str, float]
    checkpoint_uri: str
    attempt: int


@dataclass(frozen=True)
class CurvePoint:
    fold: int
    step: int
    value: float


@dataclass(frozen=True)
class TrialEvent:
    attempt: int
    kind: str
    agent_id: str
    reason: str
    at: datetime | None


@dataclass(frozen=True)
class Trial:
    id: int
    campaign_id: int
    number: int
    state: str  # QUEUED, RUNNING, COMPLETED, PRUNED, FAILED, CANCELLED, PREEMPTED
    attempt: int
    params: dict[str, ParamValue]
    value: float | None
    value_std: float | None
    agent_id: str
    error: str
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    folds: list[Fold] = field(default_factory=list)
    curves: list[CurvePoint] = field(default_factory=list)  # GetTrial only
    events: list[TrialEvent] = field(default_factory=list)  # GetTrial only
    #: Per objective, in the spec's order, for a multi-objective campaign (else empty).
    values: list[float] = field(default_factory=list)

    @classmethod
    def from_proto(cls, t: common_pb2.Trial, order: Iterable[str] = ()) -> Trial:
        return cls(
            id=int(t.id),
            campaign_id=int(t.campaign_id),
            number=int(t.number),
            state=common_pb2.TrialState.Name(t.state).removeprefix("TRIAL_STATE_"),
            attempt=int(t.attempt),
            params=ordered_params(t, order),
            value=_opt(t, "value"),
            value_std=_opt(t, "value_std"),
            agent_id=t.agent_id,
            error=t.error,
            created_at=_time(t, "created_at"),
            started_at=_time(t, "started_at"),
            finished_at=_time(t, "finished_at"),
            folds=[
                Fold(
                    f.index, f.finished, _opt(f, "value"), dict(sorted(f.metrics.items())), f.checkpoint_uri, f.attempt
                )
                for f in sorted(t.folds, key=lambda f: f.index)
            ],
            curves=[CurvePoint(p.fold, int(p.step), p.value) for p in t.curves],
            events=[TrialEvent(e.attempt, e.kind, e.agent_id, e.reason, _time(e, "at")) for e in t.events],
            values=list(t.values),
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = _jsonable(asdict(self))
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
