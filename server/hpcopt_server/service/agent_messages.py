"""What the agent use cases take and answer: leases, acquisitions, heartbeat replies
(their :class:`~hpcopt.core.records.Action` is the client's: one enum on both sides)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from hpcopt.core.records import Action
from hpcopt_server import domain as d
from hpcopt_server.service import limits as lim


class AcquireStatus(enum.StrEnum):
    GRANTED = "GRANTED"
    WAIT = "WAIT"
    DONE = "DONE"


@dataclass(frozen=True)
class Lease:
    agent_id: str
    trial_id: int
    lease_id: str

    def __post_init__(self) -> None:
        lim.require_text("lease.agent_id", self.agent_id, lim.MAX_SHORT)
        lim.require_text("lease.lease_id", self.lease_id, lim.MAX_SHORT)
        lim.require_id("lease.trial_id", self.trial_id)


@dataclass(frozen=True)
class Acquisition:
    status: AcquireStatus
    trial: d.Trial | None = None
    lease_id: str = ""
    lease_expires_at: datetime | None = None
    retry_after_seconds: float = 0.0
    campaign_spec: dict | None = None  # type: ignore[type-arg]
    #: With WAIT for a PAUSED campaign: why it is paused.
    wait_reason: str = ""


@dataclass(frozen=True)
class Registration:
    agent_id: str
    lease_seconds: float
    heartbeat_seconds: float
    campaign_spec: dict | None = None  # type: ignore[type-arg]
    server_id: str = ""
    #: The campaign's measured fold throughput (``throughput.py``), as planner points.
    throughput: tuple[dict[str, object], ...] = ()


@dataclass(frozen=True)
class HeartbeatReply:
    action: Action
    lease_expires_at: datetime | None


@dataclass(frozen=True)
class QueueState:
    """What is left to start of a campaign (``AgentService.queue``)."""

    unstarted: int
    running: int
    max_parallel: int  # 0: none
    done: bool
    throughput: tuple[dict[str, object], ...] = ()


__all__ = ["AcquireStatus", "Acquisition", "Action", "HeartbeatReply", "Lease", "QueueState"]
