"""What every service module shares: storage, the clock, settings, the optimizer cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from hpcopt_server import domain as d
from hpcopt_server.errors import NotFound
from hpcopt_server.service.clock import CLOCK
from hpcopt_server.service.heavy import HeavySlots
from hpcopt_server.service.limits import require_id
from hpcopt_server.service.shared_answers import SharedAnswers
from hpcopt_server.service.suggestions import OptimizerCache
from hpcopt_server.service.wording import ServiceWording
from hpcopt_server.storage.agent_calls import AgentCalls
from hpcopt_server.storage.repository import Storage, Tx


def utcnow() -> datetime:
    """Now, by this process's clock, which never steps (``clock.py``)."""
    return CLOCK.now()


@dataclass(frozen=True)
class ServiceSettings:
    lease_seconds: float = 60.0
    """How long an acquired trial stays with an agent without a heartbeat."""
    heartbeat_seconds: float = 15.0
    """What agents are told to use as their heartbeat period (at most a third of the lease)."""
    wait_seconds: float = 2.0
    """What an agent is told to wait before asking again when nothing can run now."""


@dataclass
class Context:
    storage: Storage
    settings: ServiceSettings = field(default_factory=ServiceSettings)
    clock: Callable[[], datetime] = utcnow
    monotonic: Callable[[], float] = time.monotonic
    """Seconds for timing caches (tests advance it instead of sleeping)."""
    optimizers: OptimizerCache = field(default_factory=OptimizerCache)
    shared: SharedAnswers = field(default_factory=SharedAnswers)
    """The dashboard's costly views, shared by every tab (see shared_answers.py)."""
    heavy: HeavySlots = field(default_factory=HeavySlots)
    """The few slots costly reads run in, server-wide (see heavy.py)."""
    observe_acquire: Callable[[float], None] = lambda seconds: None
    """Told the duration of every acquisition (the metrics module records it)."""
    agent_calls: AgentCalls = field(init=False)
    """The agents' calls on :attr:`storage` (one per process: it caches campaign specs)."""

    def __post_init__(self) -> None:
        self.agent_calls = AgentCalls(self.storage, ServiceWording())


def campaign_or_404(tx: Tx, campaign_id: int, *, lock: bool = False) -> d.Campaign:
    require_id("campaign_id", campaign_id)
    c = tx.campaigns.lock(campaign_id) if lock else tx.campaigns.get(campaign_id)
    if c is None:
        raise NotFound(f"campaign {campaign_id} does not exist")
    return c


def revisions(ctx: Context, campaign_id: int) -> tuple[str, str]:
    """(what changes when a trial of the campaign finishes; that and the trials created):
    one row read, naming the state the plot data and importance, and the timeline, were
    computed at (the creation time tells apart two databases whose campaign N has the
    same counts). NotFound if there is no such campaign."""
    require_id("campaign_id", campaign_id)
    with ctx.storage.read() as tx:
        return revisions_in(tx, campaign_id)


def revisions_in(tx: Tx, campaign_id: int) -> tuple[str, str]:
    """:func:`revisions` inside an open transaction."""
    row = tx.views.plot_revision(campaign_id)
    if row is None:
        raise NotFound(f"campaign {campaign_id} does not exist")
    finished, created_at, created = row
    done = f"{campaign_id}-{finished}-{created_at.timestamp():.6f}"
    return done, f"{done}-{created}"


def bound_curve(ctx: Context, campaign: d.Campaign, trial_id: int, fold: int, points: int) -> None:
    """After a report left the fold with ``points`` learning-curve points: past the
    campaign's cap, thin the curve to half of it (hpcopt_server.curves), in a
    transaction of its own (once per half a cap of reports)."""
    if points > campaign.curve_points:
        with ctx.storage.write() as tx:
            tx.trials.thin_curve(trial_id, fold, campaign.curve_points // 2)
