"""Agent rows: registration, when each was last heard from, its goodbye, and the trials
it holds. A repository of :class:`~hpcopt_server.storage.repository.Tx` (``tx.agents``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select, update

from hpcopt_server import domain as d
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store

#: What a registration stores (the goodbye's columns come later).
_REGISTERED = (
    "id",
    "host",
    "ranks",
    "gpus",
    "slurm_job_id",
    "campaign_id",
    "pid",
    "version",
    "registered_at",
    "last_seen_at",
    "token_id",
)


class AgentStore(Store):
    def insert(self, agent: d.Agent) -> None:
        """Registers the agent as given."""
        self.s.add(m.AgentRow(**{f: getattr(agent, f) for f in _REGISTERED}))
        self.s.flush()

    def get(self, agent_id: str) -> d.Agent | None:
        """The agent, None if none registered with this id."""
        row = self.s.get(m.AgentRow, agent_id)
        return mapping.agent(row) if row else None

    def seen(self, agent_id: str, now: datetime) -> None:
        """The agent was heard from at ``now``."""
        self.s.execute(update(m.AgentRow).where(m.AgentRow.id == agent_id).values(last_seen_at=now))

    def resize(self, agent_id: str, ranks: int, gpus: int, now: datetime) -> None:
        """The agent's trial group has ``ranks`` ranks and ``gpus`` GPUs now; heard from at ``now``."""
        values = {"ranks": ranks, "gpus": gpus, "last_seen_at": now}
        self.s.execute(update(m.AgentRow).where(m.AgentRow.id == agent_id).values(**values))

    def end(self, agent_id: str, now: datetime, reason: str = "") -> None:
        """The agent said goodbye at ``now``; a second goodbye without a reason keeps the first's."""
        values: dict[str, object] = {"exited_at": now, "last_seen_at": now}
        if reason:
            values["exit_reason"] = reason
        self.s.execute(update(m.AgentRow).where(m.AgentRow.id == agent_id).values(**values))

    def registered(self, campaign_id: int | None = None) -> list[d.Agent]:
        """The agents registered for the campaign (all when None), oldest first."""
        q = select(m.AgentRow).order_by(m.AgentRow.registered_at)
        if campaign_id is not None:
            q = q.where(m.AgentRow.campaign_id == campaign_id)
        return [mapping.agent(r) for r in self.s.scalars(q)]

    def hosts(self, agent_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """{agent id: (host, Slurm job id)} of these agents (unknown ids left out)."""
        ids = sorted({a for a in agent_ids if a})
        out: dict[str, tuple[str, str]] = {}
        for start in range(0, len(ids), 500):
            q = select(m.AgentRow.id, m.AgentRow.host, m.AgentRow.slurm_job_id).where(
                m.AgentRow.id.in_(ids[start : start + 500])
            )
            out.update((a, (h, j)) for a, h, j in self.s.execute(q))
        return out

    def live_counts(self, since: datetime) -> dict[int, int]:
        """{campaign id: agents heard from since ``since``}."""
        q = (
            select(m.AgentRow.campaign_id, func.count())
            .where(m.AgentRow.last_seen_at >= since, m.AgentRow.campaign_id.is_not(None))
            .group_by(m.AgentRow.campaign_id)
        )
        return {int(cid or 0): int(n) for cid, n in self.s.execute(q)}

    def holding(self, agent_id: str) -> list[int]:
        """Ids of the RUNNING trials the agent holds."""
        q = select(m.TrialRow.id).where(m.TrialRow.agent_id == agent_id, m.TrialRow.state == d.TrialState.RUNNING)
        return list(self.s.scalars(q.order_by(m.TrialRow.id)))

    def running_in(self, campaign_id: int) -> dict[str, tuple[int, datetime | None]]:
        """{agent id: (trial id, lease expiry)} of the campaign's RUNNING trials."""
        q = select(m.TrialRow.agent_id, m.TrialRow.id, m.TrialRow.lease_expires_at).where(
            m.TrialRow.campaign_id == campaign_id, m.TrialRow.state == d.TrialState.RUNNING
        )
        return {agent: (tid, expires) for agent, tid, expires in self.s.execute(q)}
