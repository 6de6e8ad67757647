"""Campaign rows: creation, lookups, the row lock that serializes a campaign's writers,
state and the trial numbering. A repository of :class:`~hpcopt_server.storage.repository.Tx`
(``tx.campaigns``)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from hpcopt_server import domain as d
from hpcopt_server.storage import mapping
from hpcopt_server.storage import models as m
from hpcopt_server.storage.store import Store, must

#: What the campaign list sorts by: newest (``id``), name (any case), state, algorithm,
#: progress (trials finished over the budget's ``max_trials``).
CAMPAIGN_SORT_KEYS = ("id", "name", "state", "algorithm", "progress")


class CampaignStore(Store):
    def insert(
        self,
        name: str,
        spec: dict[str, Any],
        created_at: datetime,
        *,
        submitted_at: datetime,
        created_by: d.ApiToken | None = None,
    ) -> d.Campaign:
        """A new RUNNING campaign with this spec, submitted by token ``created_by``
        (its id, for the quota; its name, the owner)."""
        row = m.CampaignRow(
            name=name,
            state=d.CampaignState.RUNNING,
            spec=spec,
            created_at=created_at,
            submitted_at=submitted_at,
            created_by=None if created_by is None else created_by.id,
            owner=None if created_by is None else created_by.name,
        )
        self.s.add(row)
        self.s.flush()
        return mapping.campaign(row)

    def named(self, name: str, *, lock: bool = False) -> list[d.Campaign]:
        """The campaigns of this name, newest first. With ``lock``, first takes a lock
        on the name to the end of the transaction (PostgreSQL: an advisory lock; SQLite's
        write transactions hold the file's one write lock already), so that two
        transactions looking for a name and creating it when missing create it once."""
        if lock and self.s.get_bind().dialect.name == "postgresql":
            key = zlib.crc32(f"campaign-name:{name}".encode())
            self.s.execute(select(func.pg_advisory_xact_lock(key)))
        q = select(m.CampaignRow).where(m.CampaignRow.name == name).order_by(m.CampaignRow.id.desc())
        return [mapping.campaign(r) for r in self.s.scalars(q.execution_options(populate_existing=True))]

    def get(self, campaign_id: int) -> d.Campaign | None:
        """The campaign as stored now (counters and state fresh), None if there is none."""
        row = self.s.get(m.CampaignRow, campaign_id, populate_existing=True)
        return mapping.campaign(row) if row else None

    def lock(self, campaign_id: int) -> d.Campaign | None:
        """:meth:`get`, holding the campaign's row lock until the transaction ends."""
        q = select(m.CampaignRow).where(m.CampaignRow.id == campaign_id).with_for_update()
        row = self.s.scalars(q.execution_options(populate_existing=True)).one_or_none()
        return mapping.campaign(row) if row else None

    def page(
        self,
        offset: int,
        limit: int,
        *,
        name: str = "",
        states: Iterable[d.CampaignState] = (),
        sort: str = "id",
        descending: bool = True,
    ) -> tuple[list[d.Campaign], int]:
        """A page of the campaigns whose name contains ``name`` (any case) and whose state
        is one of ``states`` (all when empty), by ``sort`` (:data:`CAMPAIGN_SORT_KEYS`;
        ties newest first), and how many match."""
        C = m.CampaignRow
        where = []
        if name:
            escaped = name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append(func.lower(C.name).like(f"%{escaped}%", escape="\\"))
        wanted = [str(s) for s in states]
        if wanted:
            where.append(C.state.in_(wanted))
        columns = {
            "id": C.id,
            "name": func.lower(C.name),
            "state": C.state,
            "algorithm": C.spec[("algorithm", "name")].as_string(),
            "progress": C.finished_count * 1.0 / func.coalesce(C.spec[("budget", "max_trials")].as_float(), 1.0),
        }
        column = columns[sort]
        key = column.desc() if descending else column.asc()
        q = select(C).where(*where).order_by(key, C.id.desc()).offset(offset).limit(limit)
        page = [mapping.campaign(r) for r in self.s.scalars(q)]
        return page, int(self.s.scalar(select(func.count()).select_from(C).where(*where)) or 0)

    def submissions_by(self, token_id: int, since: datetime) -> list[datetime]:
        """When the campaigns this token created or imported since ``since`` arrived,
        oldest first (the token's row is locked first, so that concurrent creations count
        each other)."""
        self.s.execute(select(m.ApiTokenRow.id).where(m.ApiTokenRow.id == token_id).with_for_update())
        q = (
            select(m.CampaignRow.submitted_at)
            .where(m.CampaignRow.created_by == token_id, m.CampaignRow.submitted_at >= since)
            .order_by(m.CampaignRow.submitted_at)
        )
        return [t for t in self.s.scalars(q) if t is not None]

    def delete(self, campaign_id: int) -> None:
        """Deletes the campaign and everything of it (its trials, folds, curves, events,
        notes and probes go with it: the foreign keys cascade)."""
        self.s.execute(delete(m.CampaignRow).where(m.CampaignRow.id == campaign_id))

    def set_pause_reason(self, campaign_id: int, reason: str | None) -> None:
        """Why the campaign is paused (None: it is not); KeyError if there is no such campaign."""
        q = update(m.CampaignRow).where(m.CampaignRow.id == campaign_id).values(pause_reason=reason)
        must(self.s.execute(q).rowcount, f"campaign {campaign_id}")  # type: ignore[attr-defined]

    def set_state(self, campaign_id: int, state: d.CampaignState, finished_at: datetime | None) -> None:
        """The campaign's state and when it ended; KeyError if there is no such campaign."""
        q = update(m.CampaignRow).where(m.CampaignRow.id == campaign_id)
        must(self.s.execute(q.values(state=state, finished_at=finished_at)).rowcount, f"campaign {campaign_id}")  # type: ignore[attr-defined]

    def set_spec(self, campaign_id: int, spec: dict[str, Any]) -> None:
        """Replaces the campaign's spec (a raised budget); KeyError if there is no such campaign."""
        q = update(m.CampaignRow).where(m.CampaignRow.id == campaign_id).values(spec=spec)
        must(self.s.execute(q).rowcount, f"campaign {campaign_id}")  # type: ignore[attr-defined]

    def set_next_number(self, campaign_id: int, number: int) -> None:
        """The number the campaign's next new trial gets; KeyError if there is no such campaign."""
        q = update(m.CampaignRow).where(m.CampaignRow.id == campaign_id).values(next_number=number)
        must(self.s.execute(q).rowcount, f"campaign {campaign_id}")  # type: ignore[attr-defined]

    def add_probes(
        self,
        campaign_id: int,
        agent_id: str,
        points: Iterable[tuple[str, int, int, float]],
        train_samples: int,
        at: datetime,
        *,
        keep: int,
    ) -> int:
        """Stores what an agent's throughput probe measured for the campaign: (scheme,
        ranks, nodes, samples per second) per width, replacing that agent's earlier row
        at the width; then keeps the campaign's ``keep`` newest rows. How many stored."""
        points = list(points)
        r = m.ThroughputProbeRow
        for scheme, ranks, nodes, _ in points:
            self.s.execute(
                delete(r).where(
                    r.campaign_id == campaign_id,
                    r.agent_id == agent_id,
                    r.scheme == scheme,
                    r.ranks == ranks,
                    r.nodes == nodes,
                )
            )
        rows = [
            m.ThroughputProbeRow(
                campaign_id=campaign_id,
                agent_id=agent_id,
                scheme=scheme,
                ranks=ranks,
                nodes=nodes,
                samples_per_second=rate,
                train_samples=train_samples,
                measured_at=at,
            )
            for scheme, ranks, nodes, rate in points
        ]
        self.s.add_all(rows)
        self.s.flush()
        newest = select(r.id).where(r.campaign_id == campaign_id).order_by(r.id.desc()).limit(keep)
        self.s.execute(delete(r).where(r.campaign_id == campaign_id, r.id.not_in(newest.scalar_subquery())))
        return len(rows)

    def trial_counts(self, campaign_ids: Iterable[int] | None = None) -> dict[int, dict[str, int]]:
        """{campaign id: {state: count}} for the given campaigns (all when None)."""
        q = select(m.TrialRow.campaign_id, m.TrialRow.state, func.count()).group_by(
            m.TrialRow.campaign_id, m.TrialRow.state
        )
        if campaign_ids is not None:
            q = q.where(m.TrialRow.campaign_id.in_(list(campaign_ids)))
        out: dict[int, dict[str, int]] = {}
        for cid, state, n in self.s.execute(q):
            out.setdefault(cid, {})[state] = n
        return out
