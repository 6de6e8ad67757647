"""Domain objects shared by the service, the optimizers and storage.

Plain frozen dataclasses: storage maps ORM rows to these in one place
(``storage/mapping.py``), transports map these to protobuf/JSON, and nothing else
crosses a layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from hpcopt.core.constraints import Outcome
from hpcopt.core.records import CampaignState as CampaignState
from hpcopt.core.records import TrialState as TrialState
from hpcopt_server.curves import DEFAULT_POINTS_PER_FOLD

ParamValue = bool | int | float | str
Params = dict[str, ParamValue]


#: The final states: a trial in one will not run again.
FINISHED_STATES = frozenset(s for s in TrialState if s.finished)


@dataclass(frozen=True)
class Campaign:
    id: int
    name: str
    state: CampaignState
    spec: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None = None
    trials_created: int = 0
    trials_finished: int = 0
    #: The principal that created it (its token's name); None: no owner (auth off, or
    #: created before campaigns had owners): every submit token may change it.
    owner: str | None = None
    #: Why a PAUSED campaign is paused (repeated identical failures, or a user).
    pause_reason: str | None = None

    @property
    def algorithm(self) -> str:
        return str(self.spec["algorithm"]["name"])

    @property
    def metric(self) -> str:
        return str(self.spec["objective"]["metric"])

    @property
    def direction(self) -> str:
        return str(self.spec["objective"]["direction"])

    @property
    def objectives(self) -> list[tuple[str, str]]:
        """(metric, direction) of each objective: one for a single-objective campaign."""
        return objectives_of(self.spec)

    @property
    def constraints(self) -> list[dict[str, Any]]:
        """The spec's ``constraints`` (canonical: ``metric``, ``max`` or ``min``, ``spread``)."""
        return list(self.spec.get("constraints") or [])

    @property
    def max_trials(self) -> int:
        return int(self.spec["budget"]["max_trials"])

    @property
    def max_parallel(self) -> int:
        return int(self.spec["budget"]["max_parallel"])

    @property
    def folds(self) -> int:
        return int(self.spec["folds"])

    @property
    def curve_points(self) -> int:
        """Learning-curve points kept per fold (campaigns from before the setting: the default)."""
        return int(self.spec["budget"].get("curve_points_per_fold", DEFAULT_POINTS_PER_FOLD))

    @property
    def final_epoch(self) -> int | None:
        """The epoch a population-based training campaign's final intervals stop at
        (``training.epochs``): its result is its best member there, not its best interval.
        None for every other algorithm."""
        if self.algorithm != "pbt":
            return None
        return int((self.spec.get("training") or {}).get("epochs") or 0)

    @property
    def promotes(self) -> bool:
        """Whether its optimizer promotes PAUSED trials to more folds and epochs
        (``algorithm: mf``): ``max_trials`` then counts configurations, and a promotion
        starts no new trial."""
        return self.algorithm == "mf"

    @property
    def epochs(self) -> int:
        """``training.epochs`` (0 without a training section)."""
        return int((self.spec.get("training") or {}).get("epochs") or 0)

    def full_fidelity(self, fidelity: Fidelity) -> bool:
        """Whether a unit of work covers all K folds and all epochs (the top rung)."""
        return fidelity.folds >= self.folds and fidelity.epochs >= self.epochs

    @property
    def max_attempts(self) -> int:
        return int(self.spec["max_attempts"])

    @property
    def pause_after_failures(self) -> int:
        """Identical failures in a row that pause the campaign (0: never; 3 in specs
        from before the option)."""
        return int(self.spec.get("pause_after_failures", 3))

    def in_space_order(self, params: Params) -> Params:
        """``params`` keyed in the order of the spec's space: the one order every view shows."""
        order = {name: i for i, name in enumerate(self.spec["space"])}
        return dict(sorted(params.items(), key=lambda kv: order.get(kv[0], len(order))))


def objectives_of(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, direction) of each objective of a canonical spec (one without ``objectives``)."""
    listed = spec.get("objectives") or [spec["objective"]]
    return [(str(o["metric"]), str(o["direction"])) for o in listed]


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
    at: datetime


@dataclass(frozen=True)
class AnalysisRequest:
    """An analysis of a finished trial asked for after the fact: ``state`` QUEUED,
    RUNNING (an agent holds it under ``lease_id`` until ``lease_expires_at``), DONE or
    FAILED (``reason`` says why)."""

    trial_id: int
    campaign_id: int
    state: str
    requested_at: datetime
    agent_id: str = ""
    lease_id: str = ""
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""


@dataclass(frozen=True)
class FoldAnalysis:
    """What the agent computed of a trained fold (the spec's ``analysis``): a document of
    plain numbers, as ``hpcopt_agent.curvature.analysis`` describes it."""

    trial_id: int
    fold: int
    attempt: int
    document: dict[str, Any]
    computed_at: datetime


@dataclass(frozen=True)
class Lineage:
    """Where a population-based training (``algorithm: pbt``) trial comes from: it trains
    population ``member`` from epoch ``start_epoch`` to ``stop_epoch``, starting from the
    checkpoint of trial ``parent`` (its number, and ``parent_id`` its id, which names the
    checkpoint file; None at epoch 0). ``previous`` is the
    member's own last interval (None for its first); when ``parent`` differs from it the
    member was exploited: it copied ``parent``'s weights, and ``changed`` holds each
    hyper-parameter the explore step changed, as ``[before, after]``. ``unreadable``
    lists the parents (by number) whose checkpoints this interval's agent could not
    read, in the order it tried them: the server re-planned it each time, and no later
    interval starts from one of them."""

    member: int
    start_epoch: int
    stop_epoch: int
    parent: int | None = None
    previous: int | None = None
    changed: dict[str, list[ParamValue]] = field(default_factory=dict)
    parent_id: int | None = None
    unreadable: tuple[int, ...] = ()

    @property
    def exploited(self) -> bool:
        return self.parent is not None and self.parent != self.previous

    def as_dict(self) -> dict[str, Any]:
        return {
            "member": self.member,
            "start_epoch": self.start_epoch,
            "stop_epoch": self.stop_epoch,
            "parent": self.parent,
            "previous": self.previous,
            "changed": {k: list(v) for k, v in self.changed.items()},
            "parent_id": self.parent_id,
            "unreadable": list(self.unreadable),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Lineage:
        def number(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        return cls(
            member=int(data["member"]),
            start_epoch=int(data["start_epoch"]),
            stop_epoch=int(data["stop_epoch"]),
            parent=number("parent"),
            previous=number("previous"),
            changed={str(k): list(v) for k, v in (data.get("changed") or {}).items()},
            parent_id=number("parent_id"),
            unreadable=tuple(int(n) for n in data.get("unreadable") or ()),
        )


@dataclass(frozen=True)
class RungResult:
    """A rung a multi-fidelity trial finished: the mean over its folds (``value``), each
    fold's value at the rung's epochs (``values``, fold order) and the wall seconds its
    folds had trained in all when it finished (the folds' ``train_seconds``)."""

    rung: int
    folds: int
    epochs: int
    value: float
    values: tuple[float, ...]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "rung": self.rung,
            "folds": self.folds,
            "epochs": self.epochs,
            "value": self.value,
            "values": list(self.values),
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Fidelity:
    """A multi-fidelity trial (``algorithm: mf``): the unit of work it trains now, its
    folds ``0 .. folds-1`` to ``epochs`` (the ladder's ``rung``), why the searcher gave it
    that rung, and the rungs it finished, lowest first. A promotion keeps the trial and
    its checkpoints and raises its rung; only the top rung (all K folds, all epochs)
    completes it."""

    rung: int
    folds: int
    epochs: int
    why: str = ""
    history: tuple[RungResult, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "rung": self.rung,
            "folds": self.folds,
            "epochs": self.epochs,
            "why": self.why,
            "history": [r.as_dict() for r in self.history],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fidelity:
        history = tuple(
            RungResult(
                int(r["rung"]),
                int(r["folds"]),
                int(r["epochs"]),
                float(r["value"]),
                tuple(float(v) for v in r["values"]),
                float(r["seconds"]),
            )
            for r in data.get("history") or ()
        )
        return cls(int(data["rung"]), int(data["folds"]), int(data["epochs"]), str(data.get("why", "")), history)


@dataclass(frozen=True)
class Suggestion:
    """What an optimizer proposes: the params, and for a PBT interval its lineage. A
    multi-fidelity suggestion carries its unit of work (``fidelity``); with ``promote``
    set it is no new trial but that PAUSED trial's next rung (``params`` are its own),
    or, with ``retire`` (why), that trial's end: PRUNED below the top rung."""

    params: Params
    lineage: Lineage | None = None
    fidelity: Fidelity | None = None
    promote: int | None = None  # a PAUSED trial's id
    retire: str = ""
    #: Not to be started: the resource constraints it is predicted to break, as its
    #: outcome (``Feasibility.refuse``); the trial is recorded FAILED with it.
    refused: Outcome | None = None


#: Event kinds that end an attempt's time on an agent (an attempt starts at "acquired");
#: "paused": a multi-fidelity trial finished a rung, and its agent let it go.
ENDS_ATTEMPT = frozenset({"completed", "failed", "pruned", "preempted", "lease_expired", "cancelled", "paused"})


@dataclass(frozen=True)
class Trial:
    id: int
    campaign_id: int
    number: int
    state: TrialState
    attempt: int
    params: Params
    created_at: datetime
    value: float | None = None
    value_std: float | None = None
    #: A multi-objective campaign's trial: the mean over folds of each objective, in
    #: the spec's order (``value`` is the first). None otherwise.
    values: tuple[float, ...] | None = None
    agent_id: str = ""
    lease_id: str = ""
    lease_expires_at: datetime | None = None
    error: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    finish_seq: int | None = None
    folds: tuple[Fold, ...] = ()
    curves: tuple[CurvePoint, ...] = ()
    events: tuple[TrialEvent, ...] = ()
    #: A population-based training interval's place in its population (``pbt``); None otherwise.
    lineage: Lineage | None = None
    #: A multi-fidelity trial's unit of work and finished rungs (``mf``); None otherwise.
    fidelity: Fidelity | None = None
    #: Against the campaign's ``constraints`` (``hpcopt.core.constraints``): each one's
    #: value (<= 0 holds, None unmeasured), the violation (0: feasible) and what was
    #: broken; None and "" while it has no outcome or the campaign has no constraints.
    constraint_values: tuple[float | None, ...] | None = None
    violation: float | None = None
    broken: str = ""

    @property
    def feasible(self) -> bool | None:
        """True or False against the campaign's constraints; None: no outcome to judge."""
        return None if self.violation is None else self.violation <= 0


#: A trial's fields that never leave the server: its lease's secret and expiry, and
#: the finish number the optimizer cache reads by.
PRIVATE_TRIAL_FIELDS = frozenset({"lease_id", "lease_expires_at", "finish_seq"})
#: The fields that are records of their own (each transport maps them with its types).
NESTED_TRIAL_FIELDS = frozenset({"folds", "curves", "events", "lineage", "fidelity"})


def trial_fields(t: Trial, wanted: Iterable[str]) -> dict[str, Any]:
    """The trial's own fields among ``wanted`` (the field names of a transport's record:
    REST, the export document, gRPC), by name, tuples as lists: the one copy of a
    Trial's fields out of the server. Private and nested fields are never included."""
    out: dict[str, Any] = {}
    for name in wanted:
        if name in _TRIAL_FIELDS and name not in PRIVATE_TRIAL_FIELDS and name not in NESTED_TRIAL_FIELDS:
            value = getattr(t, name)
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


_TRIAL_FIELDS = frozenset(f.name for f in fields(Trial))


@dataclass(frozen=True)
class Agent:
    id: str
    host: str
    ranks: int
    gpus: int
    slurm_job_id: str
    campaign_id: int | None
    pid: int
    version: str
    registered_at: datetime
    last_seen_at: datetime
    #: The token that registered it (None with auth off): only that token may use the id.
    token_id: int | None = None
    #: When it ended its registration (a normal exit); None while it runs or if it vanished.
    exited_at: datetime | None = None
    #: Why it exited without working (it refused the campaign's task or layout); "" otherwise.
    exit_reason: str = ""


@dataclass(frozen=True)
class ApiToken:
    id: int
    name: str
    scopes: frozenset[str]
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class Note:
    """A researcher's free-text note on a campaign (``trial_number`` None) or on one of
    its trials. ``version`` counts its saves (0: never written): a save names the version
    it was edited from, so two editors cannot overwrite each other unseen."""

    campaign_id: int
    trial_number: int | None
    body: str = ""
    version: int = 0
    updated_at: datetime | None = None
    #: The name of the API token that saved it ("" with auth off).
    updated_by: str = ""


@dataclass(frozen=True)
class NoteVersion:
    """One saved version of a note: when, by whom, and how long it is (its text is read
    one version at a time)."""

    version: int
    saved_at: datetime
    saved_by: str
    chars: int


@dataclass(frozen=True)
class CampaignSummary:
    """A campaign with its trial counts and best value, for listings."""

    campaign: Campaign
    trial_counts: dict[str, int] = field(default_factory=dict)
    best_value: float | None = None
    best_trial_id: int | None = None
    #: Agents of the campaign heard from within the lease period.
    live_agents: int = 0
    #: The best trial's campaign-local number (what people call it: "trial #27").
    best_trial_number: int | None = None
    #: Completed trials on the Pareto front (None for a single-objective campaign, whose
    #: best is ``best_value``).
    front_size: int | None = None
