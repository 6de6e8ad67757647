"""The agent calls' rules, each written once, as pure functions of domain values.

Storage applies them (``storage/agent_calls/``): some inside its statements' guards,
where a call is decided in one statement, and all of them in the read-only diagnosis that
names why a guarded statement matched nothing. ``tests/server/test_agent_calls.py``
checks that the guards and these functions agree.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hpcopt.core import constraints
from hpcopt_server import domain as d


class Refusal(enum.StrEnum):
    """Why an agent call changed nothing."""

    NO_TRIAL = "no_trial"
    NO_CAMPAIGN = "no_campaign"
    NOT_HOLDER = "not_holder"
    """The trial is not held by this agent under this lease (expired and requeued, released)."""
    STOPPED = "stopped"
    """The trial was CANCELLED or PRUNED while this lease held it: the agent is to stop."""
    NOT_RUNNING = "not_running"
    EXPIRED = "expired"
    FOLD_RANGE = "fold_range"
    FOLD_FINISHED = "fold_finished"
    METRICS_MISSING = "metrics_missing"
    FOLDS_MISSING = "folds_missing"
    TOO_MANY_EVENTS = "too_many_events"
    CHANGED = "changed"
    """The guarded statement matched nothing but the read after it finds nothing wrong:
    the trial changed between the two (a retry answers)."""


STOPPED_STATES = (d.TrialState.CANCELLED, d.TrialState.PRUNED)


def lease_refusal(trial: d.Trial | None, agent_id: str, lease_id: str, now: datetime) -> Refusal | None:
    """Why ``(agent_id, lease_id)`` does not hold ``trial`` at ``now``; None if it does.

    It holds when it is the trial's current lease and agent, the trial is RUNNING and
    the lease has not expired. A CANCELLED or PRUNED trial under this lease is STOPPED
    (whatever its expiry): the agent learns to stop from it."""
    if trial is None:
        return Refusal.NO_TRIAL
    if trial.lease_id != lease_id or trial.agent_id != agent_id:
        return Refusal.NOT_HOLDER
    if trial.state in STOPPED_STATES:
        return Refusal.STOPPED
    if trial.state != d.TrialState.RUNNING:
        return Refusal.NOT_RUNNING
    if trial.lease_expires_at is not None and trial.lease_expires_at < now:
        return Refusal.EXPIRED
    return None


def unit_folds(fidelity_folds: int | None, campaign_folds: int) -> int:
    """The folds a lease trains: a multi-fidelity unit's ``0 .. f-1`` (``fidelity_folds``,
    its trial's ``fidelity.folds``), else all the campaign's. A fold outside them takes
    no report (FOLD_RANGE)."""
    return campaign_folds if fidelity_folds is None else min(fidelity_folds, campaign_folds)


def fold_refusal(fold: int, folds: int, finished: Iterable[int]) -> Refusal | None:
    """Why ``fold`` cannot take a report, for a campaign of ``folds`` folds of which the
    indices ``finished`` are finished; None if it can."""
    if not 0 <= fold < folds:
        return Refusal.FOLD_RANGE
    if fold in set(finished):
        return Refusal.FOLD_FINISHED
    return None


def missing_metrics(objectives: Sequence[tuple[str, str]], metrics: Iterable[str]) -> list[str]:
    """The objectives' metrics (after the first, which is the fold's value) a fold's
    metrics lack."""
    have = set(metrics)
    return [metric for metric, _ in objectives[1:] if metric not in have]


@dataclass(frozen=True)
class FoldSummary:
    value: float
    """The mean over folds of the first objective."""
    std: float
    """The sample standard deviation over folds (0 for one fold)."""
    values: list[float] | None
    """Each objective's mean over folds, for a multi-objective campaign."""
    outcome: constraints.Outcome | None = None
    """The trial against the campaign's constraints (None: it has none)."""

    def constraint_columns(self) -> dict[str, Any]:
        """The trial's constraint columns (``cvals``, ``violation``, ``broken``)."""
        o = self.outcome
        if o is None:
            return {"cvals": None, "violation": None, "broken": ""}
        return {"cvals": list(o.values), "violation": o.violation, "broken": o.broken}


def fold_summary(
    folds: Iterable[d.Fold],
    count: int,
    objectives: Sequence[tuple[str, str]],
    bounds: Sequence[Mapping[str, Any]] = (),
) -> FoldSummary | list[int]:
    """A trial's value from its ``count`` finished folds, and its outcome against the
    constraints ``bounds``; the fold indices that have no value (or lack an objective's
    metric) if it cannot have one yet."""
    done = {f.index: f for f in folds if f.finished and f.value is not None}
    missing = [k for k in range(count) if k not in done or missing_metrics(objectives, done[k].metrics)]
    if missing:
        return missing
    values = [float(done[k].value) for k in range(count)]  # type: ignore[arg-type]
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if count > 1 else 0.0
    means = None
    if len(objectives) > 1:
        means = [mean] + [statistics.fmean(float(done[k].metrics[m]) for k in range(count)) for m, _ in objectives[1:]]
    outcome = judge(bounds, [done[k] for k in range(count)], objectives[0][0]) if bounds else None
    return FoldSummary(mean, std, means, outcome)


def judge(bounds: Sequence[Mapping[str, Any]], folds: Iterable[d.Fold], objective: str) -> constraints.Outcome:
    """The outcome against the constraints ``bounds`` of a trial whose finished ``folds``
    measured what they report: a fold's value is its ``objective``'s metric, which its
    metrics need not repeat."""
    measured = ({**f.metrics, objective: float(f.value)} for f in folds if f.finished and f.value is not None)
    return constraints.from_folds(bounds, measured)


@dataclass(frozen=True)
class Room:
    resume: int
    """Queued trials to hand out (they go first)."""
    new: int
    """New trials to create."""


def room_to_acquire(
    *,
    asking: int,
    running: int,
    queued: int,
    created: int,
    max_parallel: int,
    max_trials: int,
    promotes: bool = False,
) -> Room:
    """How many of ``asking`` acquisitions get a trial: queued trials first, then new
    ones while the budget (``max_trials`` created) allows, never more than
    ``max_parallel`` running. New trials start only once no trial waits in the queue.
    ``promotes`` (``algorithm: mf``): ``new`` may also be promotions of PAUSED trials,
    which the budget does not count; the optimizer creates at most the rest of it."""
    free = max(0, min(max_parallel - running, asking))
    resume = min(queued, free)
    left = free - resume if promotes else min(free - resume, max_trials - created)
    new = 0 if queued > resume else max(0, left)
    return Room(resume, new)


#: The states a campaign's budget can still run in: a PAUSED one starts no trial, but
#: its running trials go on, and it ends as COMPLETED once its budget has finished.
OPEN_STATES = (d.CampaignState.RUNNING, d.CampaignState.PAUSED)


def campaign_done(state: d.CampaignState, finished: int, max_trials: int) -> bool:
    """A RUNNING (or PAUSED) campaign is COMPLETED once its budget of trials has finished."""
    return state in OPEN_STATES and finished >= max_trials


def requeued_or_failed(attempt: int, max_attempts: int) -> d.TrialState:
    """What a trial that lost its agent becomes: QUEUED for another attempt, or FAILED
    after ``max_attempts``."""
    return d.TrialState.FAILED if attempt >= max_attempts else d.TrialState.QUEUED
