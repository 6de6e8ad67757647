"""REST response bodies, and the mapping from domain objects to them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from hpcopt_server import domain as d
from hpcopt_server.service.insights import AgentView, Ran


class FoldOut(BaseModel):
    index: int
    finished: bool
    value: float | None
    metrics: dict[str, float]
    checkpoint_uri: str
    attempt: int


class CurvePointOut(BaseModel):
    fold: int
    step: int
    value: float


class TrialEventOut(BaseModel):
    attempt: int
    kind: str
    agent_id: str
    reason: str
    at: datetime
    agent_host: str = ""  # the agent's host and Slurm job ("" when unknown)
    agent_job: str = ""


class LineageOut(BaseModel):
    """A population-based training interval's lineage; trials by number."""

    member: int
    start_epoch: int
    stop_epoch: int
    parent: int | None
    previous: int | None
    changed: dict[str, list[bool | int | float | str]]
    exploited: bool
    #: Parents whose checkpoints this interval's agent could not read (it was re-planned).
    unreadable: list[int] = []


class RungResultOut(BaseModel):
    """A rung a multi-fidelity trial finished: the mean over its folds, each fold's
    value at the rung's epochs, and the seconds its folds had trained by then."""

    rung: int
    folds: int
    epochs: int
    value: float
    values: list[float]
    seconds: float


class FidelityOut(BaseModel):
    """A multi-fidelity trial's unit of work (folds 0 .. folds-1 to epochs, the ladder's
    rung), why it was given it, and the rungs it finished."""

    rung: int
    folds: int
    epochs: int
    why: str
    history: list[RungResultOut]


class TrialOut(BaseModel):
    id: int
    campaign_id: int
    number: int
    state: d.TrialState
    attempt: int
    params: dict[str, bool | int | float | str]
    value: float | None
    value_std: float | None
    #: A multi-objective campaign's trial: the mean over folds of each objective.
    values: list[float] | None = None
    agent_id: str
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    folds: list[FoldOut]
    curves: list[CurvePointOut] | None = None
    events: list[TrialEventOut] | None = None
    #: Where a PBT interval comes from (``algorithm: pbt``); null otherwise.
    lineage: LineageOut | None = None
    #: A multi-fidelity trial's rung and finished rungs (``algorithm: mf``); null otherwise.
    fidelity: FidelityOut | None = None
    #: Against the campaign's ``constraints``: each one's value (<= 0 holds, null where
    #: unmeasured), the violation (0: feasible) and what was broken; null and "" while
    #: it has no outcome or the campaign has no constraints.
    constraint_values: list[float | None] | None = None
    violation: float | None = None
    broken: str = ""
    #: Seconds it spent on agents, summed over its ended attempts (a requeued trial's
    #: clock stops while it waits); in the trials table and a single trial, else null.
    ran_seconds: float | None = None
    #: When the attempt running now started (null if none): its time so far is
    #: ran_seconds + (now - running_since). Left out of ran_seconds, so that an answer
    #: changes when something happens rather than every second.
    running_since: datetime | None = None
    #: The host and Slurm job of its (last) agent; in the trials table and a single trial.
    agent_host: str = ""
    agent_job: str = ""


class CampaignOut(BaseModel):
    id: int
    name: str
    state: d.CampaignState
    algorithm: str
    metric: str
    direction: str
    max_trials: int
    trial_counts: dict[str, int]
    best_value: float | None
    best_trial_id: int | None
    created_at: datetime
    finished_at: datetime | None
    #: The whole spec; null in listings (GET /campaigns/{id} has it).
    spec: dict[str, Any] | None
    #: Agents of this campaign heard from within the lease period.
    live_agents: int = 0
    #: The best trial's campaign-local number (``best_trial_id`` is its global id).
    best_trial_number: int | None = None
    #: Every objective's metric (one for a single-objective campaign).
    objectives: list[str] = []
    #: Completed trials on the Pareto front of a multi-objective campaign (None otherwise:
    #: ``best_value`` is then the best, and with several objectives it is the first's).
    front_size: int | None = None
    #: The principal that created it (its token's name): steering, cancel, notes and
    #: budget changes need it or an admin token. None: no owner (auth off, or created
    #: before campaigns had owners); every submit token may change it.
    owner: str | None = None
    #: Why a PAUSED campaign is paused: trials that kept failing the same way (the server
    #: paused it: the spec's ``pause_after_failures``), or a user. None when not paused.
    pause_reason: str | None = None


class CampaignPage(BaseModel):
    campaigns: list[CampaignOut]
    total: int
    offset: int
    limit: int


class TrialPage(BaseModel):
    trials: list[TrialOut]
    total: int
    offset: int
    limit: int


class AgentOut(BaseModel):
    id: str
    host: str
    ranks: int
    gpus: int
    slurm_job_id: str
    campaign_id: int | None
    registered_at: datetime
    last_seen_at: datetime
    current_trial_id: int | None = None
    lease_expires_at: datetime | None = None
    #: Holding a trial but silent for two heartbeat periods: its lease is at risk.
    stale: bool = False
    #: Exited (``exited_at`` set), or silent for two heartbeat periods holding no trial.
    gone: bool = False
    exited_at: datetime | None = None
    #: Why it exited, when it refused to work (the campaign's task or layout); "" otherwise.
    exit_reason: str = ""


class PlotPoint(BaseModel):
    trial_id: int
    number: int
    value: float
    value_std: float | None
    params: dict[str, bool | int | float | str]
    values: list[float] | None = None
    finished_at: datetime | None = None
    #: Against the campaign's constraints: null without any; else whether it holds
    #: them, and what it broke.
    feasible: bool | None = None
    broken: str = ""


class BestPoint(BaseModel):
    number: int
    value: float
    trial_id: int


class EndedPoint(BaseModel):
    """A PRUNED or FAILED trial in the history: a pruned one's value is what it reached."""

    trial_id: int
    number: int
    state: str
    value: float | None
    finished_at: datetime | None = None


class ObjectiveSummary(BaseModel):
    """One objective over every completed trial."""

    metric: str
    direction: str
    #: The best-so-far line: the trials where it improved.
    best: list[BestPoint] = []
    #: The empirical distribution: at most 200 values evenly over the sorted values.
    edf: list[float] = []
    #: Where value axes stop by default: Tukey's far-out fence on the worse side (Q3 + 3 *
    #: IQR minimizing, Q1 - 3 * IQR maximizing); null: no trial lies past it (or fewer
    #: than 20 completed, or no spread).
    limit: float | None = None
    #: Completed trials worse than ``limit``.
    off_scale: int = 0


class PlotData(BaseModel):
    """Completed trials for the dashboard's plots (downsampled past ``max_points``)."""

    metric: str
    direction: str
    space: dict[str, Any]
    completed: int
    downsampled: bool
    points: list[PlotPoint]
    best: list[BestPoint]
    #: Each objective (one for a single-objective campaign), with its own best line,
    #: distribution and robust axis limit.
    objectives: list[ObjectiveSummary]
    #: Trial ids of the Pareto front over all completed trials (multi-objective only;
    #: past max_points / 2 of them, that many evenly along the first objective).
    front: list[int]
    front_size: int
    #: The empirical distribution of every completed trial's value: at most 200 values
    #: evenly spaced over the sorted values (the least and greatest included).
    edf: list[float] = []
    #: PRUNED and FAILED trials, and a multi-fidelity campaign's PAUSED ones (at most
    #: max_points, evenly over their numbers).
    ended: list[EndedPoint] = []
    ended_total: int = 0
    #: Whether ``ended`` values are partial estimates (``algorithm: mf``: a rung below
    #: all folds and epochs), never K-fold results as every point is.
    partial: bool = False


class RunningTrial(BaseModel):
    """A RUNNING trial with its progress and latest learning-curve point."""

    trial_id: int
    number: int
    attempt: int
    params: dict[str, bool | int | float | str]
    agent_id: str
    agent_host: str
    agent_job: str
    started_at: datetime | None
    #: Seconds on agents over its ended attempts (the time queued after a preemption left out).
    ran_seconds: float | None
    #: When its current attempt started: it has run ran_seconds + (now - running_since).
    running_since: datetime | None = None
    folds: int
    folds_finished: int
    #: Epochs per fold of the spec's training (0 when the spec does not say).
    epochs: int
    #: Learning-curve points reported per fold (fold index as a string key).
    steps: dict[str, int]
    latest: CurvePointOut | None


class SpanOut(BaseModel):
    """One attempt of a trial on an agent."""

    trial_id: int
    number: int
    attempt: int
    agent_id: str
    agent_host: str
    agent_job: str
    start: datetime
    #: null while it runs.
    end: datetime | None
    #: completed, failed, pruned, preempted, lease_expired, cancelled or running.
    outcome: str


class Timeline(BaseModel):
    spans: list[SpanOut]
    #: Attempt spans in all (``spans`` holds the latest ``limit`` by start).
    total: int


class ParamImportance(BaseModel):
    name: str
    importance: float
    raw: float
    trials: int


class ImportanceOut(BaseModel):
    #: Most important first; empty below 10 completed trials.
    params: list[ParamImportance]
    completed: int
    #: "first-order" or "permutation" (the ``method`` asked for).
    method: str
    #: What the numbers are, in words.
    description: str


class ThroughputPointOut(BaseModel):
    scheme: str
    #: Ranks of the fold group and the nodes it spanned.
    ranks: int
    nodes: int
    #: The median over ``count`` measurements (epochs of trained folds).
    samples_per_second: float
    source: str
    count: int


class ThroughputOut(BaseModel):
    """The planner's measurements and, per scheme, the scaling model fitted on them."""

    points: list[ThroughputPointOut]
    #: {scheme: {seconds_per_sample: {compute, comm, link}, formula, median_relative_error,
    #: assumptions, points}}
    models: dict[str, dict[str, Any]]
    #: Samples a fold trains per epoch (the median over the folds), once one has reported.
    train_samples: int | None = None


class TrialCurves(BaseModel):
    trial_id: int
    number: int
    value: float | None
    state: str
    points: list[CurvePointOut]


class WhoAmI(BaseModel):
    """Whether the server wants tokens, and what the presented one may do."""

    auth: bool
    token: str | None
    scopes: list[str]
    #: The gRPC address agents use (HOST:PORT; empty when the server does not know it).
    agent_server: str = ""


class FieldError(BaseModel):
    field: str
    message: str


class ValidationOut(BaseModel):
    valid: bool
    detail: str
    errors: list[FieldError]


class ErrorOut(BaseModel):
    detail: str
    errors: list[FieldError] = []


#: The error answers every /api/v1 route may give.
COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "no or unknown token"},
    403: {"model": ErrorOut, "description": "the token lacks the scope"},
    404: {"model": ErrorOut, "description": "no such campaign or trial"},
    422: {"model": ErrorOut, "description": "invalid input; `errors` names each field"},
}


def campaign_out(s: d.CampaignSummary, *, with_spec: bool = True) -> CampaignOut:
    c = s.campaign
    return CampaignOut(
        id=c.id,
        name=c.name,
        state=c.state,
        algorithm=c.algorithm,
        metric=c.metric,
        direction=c.direction,
        max_trials=c.max_trials,
        trial_counts=s.trial_counts,
        best_value=s.best_value,
        best_trial_id=s.best_trial_id,
        created_at=c.created_at,
        finished_at=c.finished_at,
        spec=c.spec if with_spec else None,
        live_agents=s.live_agents,
        best_trial_number=s.best_trial_number,
        objectives=[metric for metric, _ in c.objectives],
        front_size=s.front_size,
        owner=c.owner,
        pause_reason=c.pause_reason,
    )


def trial_out(
    t: d.Trial,
    *,
    full: bool = False,
    ran: Ran | None = None,
    agents: dict[str, tuple[str, str]] | None = None,
) -> TrialOut:
    """``agents``: {agent id: (host, Slurm job)} of the trial's agent and its events'."""
    hosts = agents or {}

    def host(agent_id: str | None) -> tuple[str, str]:
        return hosts.get(agent_id or "", ("", ""))

    return TrialOut(
        ran_seconds=None if ran is None else ran.seconds,
        running_since=None if ran is None else ran.since,
        agent_host=host(t.agent_id)[0],
        agent_job=host(t.agent_id)[1],
        **d.trial_fields(t, TrialOut.model_fields),
        folds=[FoldOut(**vars(f)) for f in t.folds],
        lineage=None if t.lineage is None else lineage_out(t.lineage),
        fidelity=None if t.fidelity is None else FidelityOut(**t.fidelity.as_dict()),
        curves=[CurvePointOut(**vars(p)) for p in t.curves] if full else None,
        events=[
            TrialEventOut(**vars(e), agent_host=host(e.agent_id)[0], agent_job=host(e.agent_id)[1]) for e in t.events
        ]
        if full
        else None,
    )


def agent_out(view: AgentView) -> AgentOut:
    """An agent with its current trial and health."""
    a = view.agent
    return AgentOut(
        current_trial_id=view.current_trial_id,
        lease_expires_at=view.lease_expires_at,
        stale=view.stale,
        gone=view.gone,
        exited_at=a.exited_at,
        exit_reason=a.exit_reason,
        id=a.id,
        host=a.host,
        ranks=a.ranks,
        gpus=a.gpus,
        slurm_job_id=a.slurm_job_id,
        campaign_id=a.campaign_id,
        registered_at=a.registered_at,
        last_seen_at=a.last_seen_at,
    )


def lineage_out(x: d.Lineage) -> LineageOut:
    data = x.as_dict()
    del data["parent_id"]
    return LineageOut(**data, exploited=x.exploited)


class IntervalOut(BaseModel):
    """One interval of a PBT member: a trial and its lineage."""

    number: int
    id: int
    state: d.TrialState
    value: float | None
    member: int
    start_epoch: int
    stop_epoch: int
    parent: int | None
    previous: int | None
    exploited: bool
    changed: dict[str, list[bool | int | float | str]]
    params: dict[str, bool | int | float | str]
    #: Parents whose checkpoints this interval's agent could not read (it was re-planned).
    unreadable: list[int] = []
    #: An agent could not read this interval's own checkpoints: it is no member's parent.
    checkpoints_unreadable: bool = False


class ScheduleStep(BaseModel):
    start_epoch: int
    stop_epoch: int
    value: bool | int | float | str | None


class PopulationOut(BaseModel):
    """A pbt campaign's population: every interval (the first 20,000 by number;
    ``truncated`` says when there were more), the ancestry of the best member at the
    furthest epoch (trial numbers from epoch 0), and each parameter's value along it.
    Empty for other algorithms."""

    algorithm: str
    direction: str
    intervals: list[IntervalOut]
    ancestry: list[int]
    schedule: dict[str, list[ScheduleStep]]
    truncated: bool
