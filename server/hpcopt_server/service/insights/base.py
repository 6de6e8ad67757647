"""What the dashboard's views share: their limits and the records they answer with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hpcopt_server import domain as d
from hpcopt_server.service.context import Context
from hpcopt_server.storage.views import Running, Span

MAX_PLOT_POINTS = 20_000


MAX_CURVE_TRIALS = 50


MAX_RANGES = 50


MAX_SPANS = 20_000


#: Sort keys the table computes in Python (besides the columns of TRIAL_SORT_KEYS):
#: the time a trial ran, its agent's host, and ``param:NAME``.
EXTRA_SORT_KEYS = ("duration", "agent")


#: Quantile points of the empirical distribution sent with the plot data.
EDF_POINTS = 200


COMPLETED = d.TrialState.COMPLETED.value


@dataclass(frozen=True)
class Ran:
    """A trial's time on agents: ``seconds`` over its ended attempts, and the start of the
    attempt running now (None if none). The running attempt is left out of ``seconds`` so
    that an answer changes when something happens, not every second: a reader adds now -
    ``since`` (a dashboard ticks that itself; a poll of an unchanged campaign is a 304)."""

    seconds: float
    since: datetime | None = None


@dataclass(frozen=True)
class TablePage:
    trials: list[d.Trial]
    total: int
    #: Each trial's time on agents (absent: never started).
    ran: dict[int, Ran]
    #: {agent id: (host, Slurm job id)} of the agents on this page.
    agents: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class TrialDetail:
    trial: d.Trial
    #: Its time on agents (None: never started).
    ran: Ran | None
    #: {agent id: (host, Slurm job id)} of its last agent and of every agent in its events.
    agents: dict[str, tuple[str, str]]


@dataclass(frozen=True)
class RunningPage:
    rows: list[Running]
    agents: dict[str, tuple[str, str]]
    folds: int
    #: Epochs per fold in the spec's training (0 when it does not say).
    epochs: int
    #: Each trial's time on agents (by trial id).
    ran: dict[int, Ran]


@dataclass(frozen=True)
class AgentView:
    agent: d.Agent
    current_trial_id: int | None
    lease_expires_at: datetime | None
    #: No heartbeat for two heartbeat periods: the lease is at risk.
    stale: bool
    #: Exited (said goodbye), or holds no trial and has been silent for two heartbeat
    #: periods: not coming back.
    gone: bool = False


def ran_by_trial(spans: list[Span]) -> dict[int, Ran]:
    """Each trial's time on agents: its ended attempts' seconds, and the start of the one
    running (``Ran``)."""
    seconds: dict[int, float] = {}
    since: dict[int, datetime] = {}
    for s in spans:
        seconds[s.trial_id] = seconds.get(s.trial_id, 0.0)
        if s.end is None:
            since[s.trial_id] = s.start
        else:
            seconds[s.trial_id] += max(0.0, (s.end - s.start).total_seconds())
    return {k: Ran(v, since.get(k)) for k, v in seconds.items()}


class InsightBase:
    """The service context every view reads through."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
