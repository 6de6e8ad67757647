"""The client's own records: what every ``hpcopt.Client`` and ``hpcopt.AgentClient``
call returns, what the CLI prints as text and as ``--json`` (one shape for both, see
the docs' "JSON output"). Protobuf stays inside the client: parameters are a dict in
the order of the campaign's space, states are enums with names, times are aware
``datetime``s in UTC, absent values are ``None``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from hpcopt.v1 import agent_pb2, campaign_pb2, common_pb2

ParamValue = bool | int | float | str
R = TypeVar("R")


class _Named(StrEnum):
    """An enum that is its name: compares, prints, formats and serializes as it."""

    def __repr__(self) -> str:
        return repr(self.value)


class CampaignState(_Named):
    """A campaign's state; compares equal to its name (``state == "RUNNING"``). The
    server's domain uses this enum too: states are defined once."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    #: Hands out no new trial (agents wait) while the running ones go on; resumable.
    PAUSED = "PAUSED"

    @property
    def ended(self) -> bool:
        """COMPLETED or CANCELLED: nothing more runs (unless a budget is raised)."""
        return self in (CampaignState.COMPLETED, CampaignState.CANCELLED)


class TrialState(_Named):
    """A trial's state; compares equal to its name (``state == "COMPLETED"``). The
    server's domain uses this enum too: states are defined once."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    PRUNED = "PRUNED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"
    #: Multi-fidelity (``algorithm: mf``): it finished a rung below all folds and epochs
    #: and waits to be promoted (RUNNING again, the same trial) or stopped (PRUNED).
    PAUSED = "PAUSED"

    @property
    def finished(self) -> bool:
        """A final state: the trial will not run again."""
        return self in (TrialState.COMPLETED, TrialState.PRUNED, TrialState.FAILED, TrialState.CANCELLED)


class Action(_Named):
    """The server's answer to a heartbeat or a report: go on, or stop the trial."""

    CONTINUE = "continue"
    PRUNED = "pruned"
    CANCELLED = "cancelled"


def _time(msg: Any, name: str) -> datetime | None:
    return getattr(msg, name).ToDatetime(tzinfo=UTC) if msg.HasField(name) else None


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _spec(text: str) -> dict[str, Any] | None:
    return json.loads(text) if text else None


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


def trial_state(state: int) -> TrialState:
    """``TRIAL_STATE_COMPLETED`` (the wire's number) -> ``TrialState.COMPLETED``."""
    return TrialState(common_pb2.TrialState.Name(state).removeprefix("TRIAL_STATE_"))  # type: ignore[arg-type]


def campaign_state(state: int) -> CampaignState:
    """``CAMPAIGN_STATE_RUNNING`` (the wire's number) -> ``CampaignState.RUNNING``."""
    return CampaignState(common_pb2.CampaignState.Name(state).removeprefix("CAMPAIGN_STATE_"))  # type: ignore[arg-type]


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values: states as names, times as ISO 8601 in UTC."""
        out: dict[str, Any] = _jsonable(asdict(self))  # type: ignore[call-overload]
        return out


@dataclass(frozen=True)
class Campaign(_Record):
    id: int
    name: str
    state: CampaignState
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
    #: The principal that created it (its token's name); None: no owner, and every
    #: submit token may change it.
    owner: str | None = None
    #: Why a PAUSED campaign is paused (repeated identical failures, or a user).
    pause_reason: str | None = None

    @classmethod
    def from_proto(cls, c: common_pb2.Campaign) -> Campaign:
        counts = {k: int(v) for k, v in sorted(c.trial_counts.items())}
        return cls(
            id=int(c.id),
            name=c.name,
            state=campaign_state(c.state),
            algorithm=c.algorithm,
            metric=c.metric,
            direction=c.direction,
            max_trials=int(c.max_trials),
            finished=sum(n for s, n in counts.items() if s not in ("QUEUED", "RUNNING", "PREEMPTED", "PAUSED")),
            trial_counts=counts,
            best_value=_opt(c, "best_value"),
            best_trial_id=_opt(c, "best_trial_id"),
            best_trial_number=_opt(c, "best_trial_number"),
            created_at=_time(c, "created_at"),
            finished_at=_time(c, "finished_at"),
            spec=_spec(c.spec_json),
            owner=c.owner or None,
            pause_reason=c.pause_reason or None,
        )

    @property
    def folds(self) -> int:
        return int((self.spec or {}).get("folds", 1))

    @property
    def space(self) -> list[str]:
        """The parameter names, in the spec's order (empty in listings, which carry no spec)."""
        return list((self.spec or {}).get("space", {}))

    @property
    def objectives(self) -> list[str]:
        """The metric of each objective (one for a single-objective campaign)."""
        listed = (self.spec or {}).get("objectives") or [{"metric": self.metric}]
        return [str(o["metric"]) for o in listed]

    @property
    def directions(self) -> list[str]:
        """``minimize``/``maximize`` of each objective, in the order of ``objectives``."""
        listed = (self.spec or {}).get("objectives") or [{"direction": self.direction}]
        return [str(o.get("direction", "minimize")) for o in listed]


@dataclass(frozen=True)
class Lineage(_Record):
    """A population-based training interval (``algorithm: pbt``): it trains population
    ``member`` from ``start_epoch`` to ``stop_epoch``, starting from the checkpoints of
    trial number ``parent`` (id ``parent_trial_id``; None at epoch 0). ``previous`` is the
    member's own last interval; when ``parent`` differs, the member copied ``parent``'s
    weights and ``changed`` holds each hyper-parameter the explore step changed as
    ``[before, after]``. ``unreadable``: the parents whose checkpoints its agent could
    not read, in the order tried (the server re-planned the interval after each)."""

    member: int
    start_epoch: int
    stop_epoch: int
    parent: int | None
    parent_trial_id: int | None
    previous: int | None
    changed: dict[str, list[ParamValue]]
    unreadable: tuple[int, ...] = ()

    @property
    def exploited(self) -> bool:
        return self.parent is not None and self.parent != self.previous

    @classmethod
    def from_proto(cls, x: common_pb2.Lineage) -> Lineage:
        return cls(
            member=x.member,
            start_epoch=x.start_epoch,
            stop_epoch=x.stop_epoch,
            parent=int(x.parent) if x.HasField("parent") else None,
            parent_trial_id=int(x.parent_trial_id) or None,
            previous=int(x.previous) if x.HasField("previous") else None,
            changed=dict(json.loads(x.changed_json)) if x.changed_json else {},
            unreadable=tuple(int(n) for n in x.unreadable),
        )


@dataclass(frozen=True)
class RungResult(_Record):
    """A rung a multi-fidelity trial finished: the mean over its folds, each fold's value
    at its epochs, and the wall seconds its folds had trained in all by then."""

    rung: int
    folds: int
    epochs: int
    value: float
    values: tuple[float, ...]
    seconds: float


@dataclass(frozen=True)
class Fidelity(_Record):
    """A multi-fidelity trial (``algorithm: mf``): the unit it trains now (folds ``0 ..
    folds-1`` to ``epochs``, the ladder's ``rung``), why it was given it, and the rungs it
    finished (``history``)."""

    rung: int
    folds: int
    epochs: int
    why: str
    history: tuple[RungResult, ...] = ()

    @classmethod
    def from_proto(cls, x: common_pb2.Fidelity) -> Fidelity:
        history = tuple(RungResult(r.rung, r.folds, r.epochs, r.value, tuple(r.values), r.seconds) for r in x.history)
        return cls(x.rung, x.folds, x.epochs, x.why, history)


@dataclass(frozen=True)
class Fold(_Record):
    index: int
    finished: bool
    value: float | None
    metrics: dict[str, float]
    checkpoint_uri: str
    attempt: int

    @classmethod
    def from_proto(cls, f: common_pb2.Fold) -> Fold:
        return cls(f.index, f.finished, _opt(f, "value"), dict(sorted(f.metrics.items())), f.checkpoint_uri, f.attempt)


@dataclass(frozen=True)
class CurvePoint(_Record):
    fold: int
    step: int
    value: float


@dataclass(frozen=True)
class TrialEvent(_Record):
    attempt: int
    kind: str
    agent_id: str
    reason: str
    at: datetime | None


@dataclass(frozen=True)
class Trial(_Record):
    id: int  # global id (the API's); ``number`` is what tables show (#27)
    campaign_id: int
    number: int
    state: TrialState
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
    curves: list[CurvePoint] = field(default_factory=list)  # get_trial only
    events: list[TrialEvent] = field(default_factory=list)  # get_trial only
    #: Per objective, in the spec's order, for a multi-objective campaign (else empty).
    values: list[float] = field(default_factory=list)
    #: Where a population-based training interval comes from (``algorithm: pbt``).
    lineage: Lineage | None = None
    #: A multi-fidelity trial's rung and the rungs it finished (``algorithm: mf``).
    fidelity: Fidelity | None = None
    #: Against the campaign's ``constraints``: each one's value (<= 0 holds, None where
    #: unmeasured), the violation (0: feasible; None: no outcome yet, or no constraints)
    #: and what was broken.
    constraint_values: list[float | None] = field(default_factory=list)
    violation: float | None = None
    broken: str = ""

    @property
    def feasible(self) -> bool | None:
        """Whether it satisfies its campaign's constraints; None: no outcome to judge."""
        return None if self.violation is None else self.violation <= 0

    @classmethod
    def from_proto(cls, t: common_pb2.Trial, order: Iterable[str] = ()) -> Trial:
        return cls(
            id=int(t.id),
            campaign_id=int(t.campaign_id),
            number=int(t.number),
            state=trial_state(t.state),
            attempt=int(t.attempt),
            params=ordered_params(t, order),
            value=_opt(t, "value"),
            value_std=_opt(t, "value_std"),
            agent_id=t.agent_id,
            error=t.error,
            created_at=_time(t, "created_at"),
            started_at=_time(t, "started_at"),
            finished_at=_time(t, "finished_at"),
            folds=[Fold.from_proto(f) for f in sorted(t.folds, key=lambda f: f.index)],
            curves=[CurvePoint(p.fold, int(p.step), p.value) for p in t.curves],
            events=[TrialEvent(e.attempt, e.kind, e.agent_id, e.reason, _time(e, "at")) for e in t.events],
            values=list(t.values),
            lineage=Lineage.from_proto(t.lineage) if t.HasField("lineage") else None,
            fidelity=Fidelity.from_proto(t.fidelity) if t.HasField("fidelity") else None,
            constraint_values=[None if math.isnan(v) else float(v) for v in t.constraint_values],
            violation=_opt(t, "violation"),
            broken=t.broken,
        )


@dataclass(frozen=True)
class Page(_Record, Generic[R]):
    """One page of a listing: ``items``, and ``total`` counting every match."""

    items: list[R]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True)
class ParetoFront(_Record):
    """The non-dominated completed trials of a campaign, best first in the first
    objective; ``trial.values`` follow ``objectives`` (a single-objective campaign's
    front is its best trial)."""

    campaign_id: int
    objectives: list[str]
    directions: list[str]
    trials: list[Trial]


@dataclass(frozen=True)
class Agent(_Record):
    """An agent's registration: its id, the lease terms and the server's identity."""

    agent_id: str
    lease_seconds: float
    heartbeat_seconds: float
    server_id: str
    campaign_spec: dict[str, Any] | None  # the campaign's spec when one was named
    #: The campaign's measured fold throughput (planner points as dicts; hpcopt.core.planner).
    throughput: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_proto(cls, r: agent_pb2.RegisterResponse) -> Agent:
        return cls(
            r.agent_id,
            r.lease_seconds,
            r.heartbeat_seconds,
            r.server_id,
            _spec(r.campaign_spec_json),
            _points(r.throughput_json),
        )


def _points(text: str) -> tuple[dict[str, Any], ...]:
    points = json.loads(text) if text else []
    return tuple(p for p in points if isinstance(p, dict)) if isinstance(points, list) else ()


@dataclass(frozen=True)
class QueueState(_Record):
    """What is left to start of a campaign (``AgentClient.queue``)."""

    unstarted: int
    running: int
    max_parallel: int  # 0: none
    done: bool
    #: The campaign's measured fold throughput when asked for (planner points as dicts).
    throughput: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_proto(cls, r: agent_pb2.QueueResponse) -> QueueState:
        return cls(r.unstarted, r.running, r.max_parallel, r.done, _points(r.throughput_json))


@dataclass(frozen=True)
class Lease(_Record):
    """A held trial: every report quotes it."""

    agent_id: str
    trial_id: int
    lease_id: str

    def to_proto(self) -> agent_pb2.TrialLease:
        return agent_pb2.TrialLease(agent_id=self.agent_id, trial_id=self.trial_id, lease_id=self.lease_id)


@dataclass(frozen=True)
class AnalysisRequest(_Record):
    """An analysis of a finished trial asked for after the fact (``request_analysis``):
    ``state`` QUEUED, RUNNING (an agent of the campaign computes it), DONE or FAILED
    (``reason`` says why)."""

    trial_id: int
    state: str
    requested_at: datetime | None
    finished_at: datetime | None
    reason: str

    @classmethod
    def from_proto(cls, r: campaign_pb2.AnalysisRequest) -> AnalysisRequest:
        return cls(int(r.trial_id), r.state, _time(r, "requested_at"), _time(r, "finished_at"), r.reason)


@dataclass(frozen=True)
class Assignment(_Record):
    """What ``acquire`` got: ``status`` ``granted`` (``trial`` and ``lease`` set),
    ``wait`` (ask again after ``retry_after_seconds``) or ``done`` (stop asking)."""

    status: str
    trial: Trial | None
    lease: Lease | None
    lease_expires_at: datetime | None
    retry_after_seconds: float
    campaign_spec: dict[str, Any] | None
    #: With ``wait`` for a PAUSED campaign: why it is paused.
    wait_reason: str = ""

    @classmethod
    def from_proto(cls, r: agent_pb2.AcquireResponse, agent_id: str) -> Assignment:
        status = agent_pb2.AcquireResponse.Status.Name(r.status).removeprefix("STATUS_").lower()
        spec = _spec(r.campaign_spec_json)
        granted = status == "granted"
        order = list((spec or {}).get("space", {}))
        return cls(
            status=status,
            trial=Trial.from_proto(r.trial, order) if granted else None,
            lease=Lease(agent_id, int(r.trial.id), r.lease_id) if granted else None,
            lease_expires_at=_time(r, "lease_expires_at"),
            retry_after_seconds=r.retry_after_seconds,
            campaign_spec=spec,
            wait_reason=r.wait_reason,
        )


ACTIONS = {
    agent_pb2.HeartbeatResponse.ACTION_CONTINUE: Action.CONTINUE,
    agent_pb2.HeartbeatResponse.ACTION_STOP_PRUNED: Action.PRUNED,
    agent_pb2.HeartbeatResponse.ACTION_STOP_CANCELLED: Action.CANCELLED,
}


def action(r: agent_pb2.HeartbeatResponse) -> Action:
    return ACTIONS.get(r.action, Action.CONTINUE)


#: The wire value of each action (the server's side of :data:`ACTIONS`).
ACTION_VALUES = {a: wire for wire, a in ACTIONS.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, StrEnum):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
